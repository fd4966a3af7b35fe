"""Loading: the early-exit view, dtypes reflected in the measured bytes, the tokenizer check."""

from __future__ import annotations

import pytest
import torch

from tracer.errors import TracerError
from tracer.drafts.early_exit import layers_of, view
from tracer.loading import load_model, resolve
from tracer.pair import load_pair
from tracer.routing import RouterCapture
from tracer.shape import model_shape


@pytest.mark.parametrize("family", ["deepseek_v3", "gpt_oss"])
def test_early_exit_view_is_the_first_layers_then_norm_and_head(family, pairs):
    model = pairs[family].target.model
    cut = view(model, 2)
    ids = torch.randint(3, 259, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        hidden = model(ids, output_hidden_states=True).hidden_states[2]  # output of layer 1
        want = model.lm_head(model.model.norm(hidden))
        got = cut(ids).logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert len(model.model.layers) == model.config.num_hidden_layers, "the target is untouched"
    assert cut.lm_head.weight is model.lm_head.weight, "a view shares the weights"


def test_early_exit_spec():
    from tracer.drafts.registry import KINDS, parse

    assert layers_of("3", 8) == 3
    assert layers_of("auto", 8) == 2
    assert parse("early-exit:3") == (KINDS["early-exit"], "3")
    assert parse("Qwen/Qwen3-0.6B") == (KINDS["model"], "Qwen/Qwen3-0.6B")
    for bad in ("8", "0", "x"):
        with pytest.raises(TracerError):
            layers_of(bad, 8)


def test_bfloat16_halves_the_measured_expert_bytes(tiny_dirs):
    src = resolve(str(tiny_dirs["qwen3_moe"]))
    model = load_model(src, dtype="bfloat16")
    assert model.dtype == torch.bfloat16
    cap = RouterCapture(model)
    shape = model_shape(model, "t", cap.moe_layers, cap.top_k, src.ref)
    assert shape.expert_bytes == 3 * 64 * 32 * 2 and shape.bytes_per_param == 2.0
    assert shape.kv_bytes_per_token == 3 * 2 * 2 * 16 * 2  # layers * (k, v) * kv heads * head_dim * bytes


def test_a_draft_must_share_the_tokenizer(tiny_dirs, tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    other = Tokenizer(models.WordLevel(vocab={"<unk>": 0, "a": 1}, unk_token="<unk>"))
    other.pre_tokenizer = pre_tokenizers.Whitespace()
    d = tmp_path / "odd-draft"
    AutoModelForCausalLM.from_pretrained(tiny_dirs["olmoe"] / "draft").save_pretrained(d)
    PreTrainedTokenizerFast(tokenizer_object=other, unk_token="<unk>").save_pretrained(d)
    with pytest.raises(TracerError, match="tokenizer differs"):
        load_pair(str(tiny_dirs["olmoe"]), str(d))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tree_matches_cpu(tiny_dirs):
    """On a GPU: the same routing and next tokens as on the CPU for one verified tree (fp32)."""
    from tracer.tree import chain
    from tracer.verify import verify_tree

    out = {}
    for dev in ("cpu", "cuda"):
        pair = load_pair(str(tiny_dirs["deepseek_v3"]), dtype="float32", device=dev)
        pair.target.extend(torch.arange(3, 40))
        out[dev] = verify_tree(pair.target, pair.capture, chain([50, 60, 70, 80]))
    assert (out["cpu"].experts == out["cuda"].experts).all()
    assert (out["cpu"].target_next == out["cuda"].target_next).all()
