"""Weight formats as bits per weight, block scales included: the served dtypes of the GPU engines and the GGUF
types llama.cpp, ik_llama.cpp and KTransformers run (`--dtype` on any shape, catalogue or config.json).

A GGUF block type stores `block` weights in `bytes` bytes (ggml-common.h's block_* structs, e.g. block_q4_K:
two fp16 super-block scales, 12 bytes of 6-bit scales and mins, 128 bytes of 4-bit quants for 256 weights =
144 bytes, 4.5 bits per weight). A mix (Q4_K_M, Q5_K_M) gives different tensors different block types
(llama-quant.cpp's rules); its bits per weight are read off a published file: bartowski's DeepSeek-V3-0324
GGUFs (https://huggingface.co/bartowski/deepseek-ai_DeepSeek-V3-0324-GGUF: Q8_0 713.29 GB, Q6_K 550.80 GB,
Q5_K_M 475.40 GB, Q4_K_M 404.43 GB). Q8_0 is 8.5 bits exactly, so that model holds 713.29e9 / 1.0625 =
671.3e9 weights and Q4_K_M averages 404.43e9 * 8 / 671.3e9 = 4.82 bits, Q5_K_M 5.67 (Q6_K gives 6.564, its
block's 6.5625: the sizes check out).
"""

from __future__ import annotations

import dataclasses

from ecosim.catalog.shape import ModelShape

_GGML = "ggml-common.h block_{0} struct (https://github.com/ggml-org/llama.cpp/blob/master/ggml/src/ggml-common.h)"
_MIX = ("llama-quant.cpp mix, bits per weight from bartowski's DeepSeek-V3-0324 GGUF file sizes "
        "(https://huggingface.co/bartowski/deepseek-ai_DeepSeek-V3-0324-GGUF)")

# name -> (bits per weight, source)
BITS: dict[str, tuple[float, str]] = {
    "bf16": (16.0, "2 bytes"),
    "fp8": (8.0, "1 byte (block scales per 128 x 128 left out, < 0.01%)"),
    "int8": (8.0, "1 byte"),
    "mxfp4": (4.25, "OCP MX: 4 bits + one 8-bit scale per 32"),
    "nvfp4": (4.5, "NVIDIA NVFP4: 4 bits + one FP8 scale per 16"),
    # GGUF block types: bytes per block x 8 / weights per block
    "q8_0": (34 * 8 / 32, _GGML.format("q8_0: fp16 scale + 32 int8 = 34 bytes per 32")),
    "q6_k": (210 * 8 / 256, _GGML.format("q6_K: 128 + 64 + 16 + 2 = 210 bytes per 256")),
    "q5_k": (176 * 8 / 256, _GGML.format("q5_K: 4 + 12 + 32 + 128 = 176 bytes per 256")),
    "q5_0": (22 * 8 / 32, _GGML.format("q5_0: 2 + 4 + 16 = 22 bytes per 32")),
    "q4_k": (144 * 8 / 256, _GGML.format("q4_K: 4 + 12 + 128 = 144 bytes per 256")),
    "q4_0": (18 * 8 / 32, _GGML.format("q4_0: fp16 scale + 16 = 18 bytes per 32")),
    "q4_1": (20 * 8 / 32, _GGML.format("q4_1: 2 fp16 + 16 = 20 bytes per 32")),
    "iq4_xs": (136 * 8 / 256, _GGML.format("iq4_xs: 2 + 2 + 4 + 128 = 136 bytes per 256")),
    "iq4_nl": (18 * 8 / 32, _GGML.format("iq4_nl: 2 + 16 = 18 bytes per 32")),
    "q3_k": (110 * 8 / 256, _GGML.format("q3_K: 32 + 64 + 12 + 2 = 110 bytes per 256")),
    "q2_k": (84 * 8 / 256, _GGML.format("q2_K: 16 + 64 + 4 = 84 bytes per 256")),
    "iq2_xxs": (66 * 8 / 256, _GGML.format("iq2_xxs: 2 + 64 = 66 bytes per 256")),
    "q5_k_m": (475.40e9 * 8 / 671.3e9, _MIX),
    "q4_k_m": (404.43e9 * 8 / 671.3e9, _MIX),
}
GGUF = tuple(k for k, (_, src) in BITS.items() if "ggml" in src or "llama-quant" in src)
# Weight formats whose engines quantise activations in a kernel of their own before each GEMM (ModelShape.act_quant):
# block FP8 (DeepSeek's and Qwen's FP8 checkpoints, W8A8 in SGLang and vLLM). Not nvfp4 (TensorRT-LLM fuses the
# BF16->NVFP4 quantisation into its all-reduce + RMSNorm kernel, tech blog 1's Module9), mxfp4 (Hopper: BF16
# activations), int8 (weight-only where a row does not say otherwise), bf16, nor a GGUF type.
ACT_QUANT = ("fp8",)


def bits(dtype: str) -> float:
    return BITS[dtype][0]


def at_dtype(shape: ModelShape, dtype: str) -> ModelShape:
    """The shape with routed experts stored at `dtype`.

    GPU formats: a BF16 model served in FP8/INT8 halves its dense weights too (the BF16 LM head excepted); block
    FP8 quantises activations in kernels of their own. GGUF: every matrix, dense ones and the LM head included, is
    stored at the type's bits (a mix's average stands for its per-tensor choices)."""
    bpp = bits(dtype) / 8
    dense = shape.dense_bytes
    if dtype in GGUF:
        dense = shape.dense_params * bpp
    elif bpp == 1.0 and shape.bytes_per_param == 2.0:
        head = shape.vocab_size * shape.hidden_size * 2
        dense = head + (dense - head) // 2
    return dataclasses.replace(shape, expert_bytes=round(shape.expert_params * bpp), dense_bytes=int(dense),
                               bytes_per_param=bpp, act_quant=dtype in ACT_QUANT, name=f"{shape.name} ({dtype})")
