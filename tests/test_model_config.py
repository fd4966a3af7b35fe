"""A model shape from a Hugging Face config.json (ecosim/catalog/hf_config.py), as a spec.

- Every catalogue shape is what its own config.json gives: each config is built with transformers' config
  class at the sizes models.py quotes, and every numeric field must come out exactly as the catalogue's.
- One tiny config worked by hand, its bytes written out as arithmetic.
- Families beyond the catalogue, each checked by hand on what the family makes special.
- `--model` takes a config.json (or its directory) on the command line, end to end; what is not a MoE
  config.json is refused in one line.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ecosim.catalog.hf_config import SUPPORTED, shape_from_config
from ecosim.catalog.models import MODELS, ModelShape, gqa_params, get_model
from ecosim.cli import main as ecosim_main
from ecosim.errors import EcoSimError

NUMERIC = ("num_layers", "moe_layers", "num_experts", "top_k", "num_shared_experts", "hidden_size",
           "moe_intermediate_size", "vocab_size", "expert_bytes", "dense_bytes", "kv_bytes_per_token",
           "bytes_per_param")
FP8 = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
MXFP4 = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                            "model.embed_tokens", "lm_head"]}


def _catalogue_config(name: str) -> dict:
    """The catalogue model's config.json, rebuilt with transformers at the sizes models.py quotes."""
    t = pytest.importorskip("transformers")
    bf16 = {"dtype": "bfloat16"}
    qwen3 = {"num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936, "num_key_value_heads": 4,
             "head_dim": 128, **bf16}
    gpt_oss = {"hidden_size": 2880, "intermediate_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8,
               "head_dim": 64, "vocab_size": 201088, "num_experts_per_tok": 4, "quantization_config": MXFP4, **bf16}
    configs = {
        "deepseek-v3.1": lambda: t.DeepseekV3Config(
            num_hidden_layers=61, first_k_dense_replace=3, n_routed_experts=256, n_shared_experts=1,
            num_experts_per_tok=8, hidden_size=7168, moe_intermediate_size=2048, intermediate_size=18432,
            vocab_size=129280, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
            v_head_dim=128, num_attention_heads=128, n_group=8, topk_group=4, quantization_config=FP8, **bf16),
        "qwen3-235b-a22b": lambda: t.Qwen3MoeConfig(num_hidden_layers=94, hidden_size=4096, moe_intermediate_size=1536,
                                                    num_attention_heads=64, **qwen3),
        "qwen3-30b-a3b": lambda: t.Qwen3MoeConfig(num_hidden_layers=48, hidden_size=2048, moe_intermediate_size=768,
                                                  num_attention_heads=32, **qwen3),
        "gpt-oss-120b": lambda: t.GptOssConfig(num_hidden_layers=36, num_local_experts=128, **gpt_oss),
        "gpt-oss-20b": lambda: t.GptOssConfig(num_hidden_layers=24, num_local_experts=32, **gpt_oss),
        "mixtral-8x7b": lambda: t.MixtralConfig(
            num_hidden_layers=32, num_local_experts=8, num_experts_per_tok=2, hidden_size=4096,
            intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8, vocab_size=32000, **bf16),
        "olmoe-1b-7b": lambda: t.OlmoeConfig(
            num_hidden_layers=16, num_experts=64, num_experts_per_tok=8, hidden_size=2048, intermediate_size=1024,
            num_attention_heads=16, num_key_value_heads=16, vocab_size=50304, **bf16),
    }
    return configs[name]().to_dict()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_catalogue_shape_is_what_its_config_gives(name):
    want = MODELS[name]
    got = shape_from_config(_catalogue_config(name), name, want.source)
    assert {f: getattr(got, f) for f in NUMERIC} == {f: getattr(want, f) for f in NUMERIC}
    assert got == want  # family, act_quant and group limits too: the catalogue's shape itself


def test_a_tiny_config_by_hand():
    """2 layers, both MoE, 4 experts top-2, hidden 8, one expert 4 wide, 2 query heads and 1 KV head of 4,
    vocab 16, BF16."""
    cfg = {"model_type": "mixtral", "num_hidden_layers": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
           "hidden_size": 8, "intermediate_size": 4, "num_attention_heads": 2, "num_key_value_heads": 1,
           "head_dim": 4, "vocab_size": 16, "dtype": "bfloat16"}
    s = shape_from_config(cfg, "tiny", "by hand")
    assert (s.num_layers, s.moe_layers, s.num_experts, s.top_k, s.num_shared_experts) == (2, (0, 1), 4, 2, 0)
    # one expert: gate + up + down = 3 * 8 * 4 parameters of 2 bytes
    assert s.expert_bytes == 3 * 8 * 4 * 2 == 192
    attention = 8 * 2 * 4 + 8 * 1 * 4 + 8 * 1 * 4 + 2 * 4 * 8  # q, k, v, o = 192 per layer
    router = 4 * 8 * 2  # per MoE layer, BF16
    lm_head = 16 * 8 * 2
    assert s.dense_bytes == 2 * attention * 2 + 2 * router + lm_head == 1152
    assert s.kv_bytes_per_token == 2 * (2 * 1 * 4) * 2 == 32  # layers * (k + v elements) * 2 bytes
    assert s.bytes_per_param == 2.0 and s.attention == "gqa"
    # FP32: every byte count doubles
    s32 = shape_from_config({**cfg, "dtype": "float32"}, "tiny", "by hand")
    assert (s32.expert_bytes, s32.dense_bytes, s32.kv_bytes_per_token, s32.bytes_per_param) == (384, 2304, 64, 4.0)
    # `torch_dtype` (transformers before 5) is read as `dtype`; neither: BF16
    legacy = {**{k: v for k, v in cfg.items() if k != "dtype"}, "torch_dtype": "float32"}
    assert shape_from_config(legacy, "t", "").expert_bytes == 384
    assert shape_from_config({k: v for k, v in cfg.items() if k != "dtype"}, "t", "").expert_bytes == 192


def test_qwen2_moe_shared_expert_of_its_own_width_and_sparse_step():
    t = pytest.importorskip("transformers")
    # Qwen1.5-MoE-A2.7B's sizes (transformers' defaults): 24 layers, 60 experts top-4, hidden 2048, experts 1408
    # wide, one shared expert 5632 wide
    cfg = t.Qwen2MoeConfig(dtype="bfloat16").to_dict()
    s = shape_from_config(cfg, "q", "")
    no_shared = shape_from_config({**cfg, "shared_expert_intermediate_size": 0}, "q", "")
    assert (s.num_experts, s.top_k, s.num_shared_experts, no_shared.num_shared_experts) == (60, 4, 1, 0)
    assert s.expert_bytes == 3 * 2048 * 1408 * 2
    assert s.dense_bytes - no_shared.dense_bytes == 24 * 3 * 2048 * 5632 * 2
    # decoder_sparse_step 2: layers 1, 3, ... are MoE; mlp_only_layers are dense whatever the step
    sparse = shape_from_config({**cfg, "decoder_sparse_step": 2, "mlp_only_layers": [3], "intermediate_size": 4000},
                               "q", "")
    assert sparse.moe_layers == tuple(i for i in range(1, 24, 2) if i != 3)
    dense = 24 - len(sparse.moe_layers)  # 13 layers turn dense: a 4000-wide MLP (intermediate_size) each, in place
    assert dense == 13  # of their shared expert and router
    assert sparse.dense_bytes - s.dense_bytes == dense * (3 * 2048 * 4000 * 2 - 3 * 2048 * 5632 * 2 - 60 * 2048 * 2)


def test_llama4_interleaves_dense_and_moe_layers():
    t = pytest.importorskip("transformers")
    # Llama-4-Maverick's sizes: 48 layers, MoE every 2nd (interleave_moe_layer_step 2), 128 experts top-1, hidden
    # 5120, experts 8192 wide, dense layers 16384 wide (intermediate_size_mlp), a shared expert as wide as one
    text = dict(num_hidden_layers=48, interleave_moe_layer_step=2, num_local_experts=128, num_experts_per_tok=1,
                hidden_size=5120, intermediate_size=8192, intermediate_size_mlp=16384, num_attention_heads=40,
                num_key_value_heads=8, head_dim=128, vocab_size=202048, dtype="bfloat16")
    s = shape_from_config(t.Llama4TextConfig(**text).to_dict(), "maverick", "")
    assert s.family == "llama4_text" and s.moe_layers == tuple(range(1, 48, 2))
    assert (s.num_experts, s.top_k, s.num_shared_experts) == (128, 1, 1)
    params = 48 * gqa_params(5120, 40, 8, 128) + 24 * 3 * 5120 * 16384 + 24 * 1 * 3 * 5120 * 8192
    assert s.dense_bytes == params * 2 + 24 * 128 * 5120 * 2 + 202048 * 5120 * 2
    # the multimodal wrapper (model_type llama4) is read through its text_config
    wrapped = t.Llama4Config(text_config=text).to_dict()
    assert wrapped["model_type"] == "llama4"
    assert shape_from_config(wrapped, "maverick", "") == s


def test_glm4_moe_head_dim_and_first_dense_layer():
    t = pytest.importorskip("transformers")
    # GLM-4.5-Air's sizes: 46 layers, the first dense, 128 experts top-8, 1 shared, hidden 4096, 96 query heads and
    # 8 KV heads of 128 (96 * 128 != 4096), n_group 1 (no group limit)
    cfg = t.Glm4MoeConfig(num_hidden_layers=46, first_k_dense_replace=1, n_routed_experts=128, num_experts_per_tok=8,
                          n_shared_experts=1, hidden_size=4096, moe_intermediate_size=1408, intermediate_size=10944,
                          num_attention_heads=96, num_key_value_heads=8, head_dim=128, vocab_size=151552,
                          n_group=1, topk_group=1, dtype="bfloat16").to_dict()
    s = shape_from_config(cfg, "glm", "")
    assert s.moe_layers == tuple(range(1, 46)) and s.num_shared_experts == 1
    assert s.kv_bytes_per_token == 46 * 2 * 8 * 128 * 2
    params = 46 * (4096 * 96 * 128 * 2 + 4096 * 8 * 128 * 2) + 1 * 3 * 4096 * 10944 + 45 * 1 * 3 * 4096 * 1408
    assert s.dense_bytes == params * 2 + 45 * 128 * 4096 * 2 + 151552 * 4096 * 2
    assert s.attention == "gqa" and s.n_group is None and s.group_limits == (0, 0)


def test_deepseek_v2_lite_without_q_lora():
    t = pytest.importorskip("transformers")
    # DeepSeek-V2-Lite's sizes: 27 layers, the first dense, 64 experts top-6, 2 shared, hidden 2048, MLA with no
    # q_lora_rank (one q projection), kv_lora_rank 512, 16 heads, greedy routing
    cfg = t.DeepseekV2Config(num_hidden_layers=27, first_k_dense_replace=1, n_routed_experts=64, num_experts_per_tok=6,
                             n_shared_experts=2, hidden_size=2048, moe_intermediate_size=1408,
                             intermediate_size=10944, q_lora_rank=None, kv_lora_rank=512, qk_nope_head_dim=128,
                             qk_rope_head_dim=64, v_head_dim=128, num_attention_heads=16, vocab_size=102400,
                             topk_method="greedy", n_group=1, topk_group=1, dtype="bfloat16").to_dict()
    assert cfg["q_lora_rank"] is None
    s = shape_from_config(cfg, "lite", "")
    assert s.attention == "mla" and s.moe_layers == tuple(range(1, 27))
    assert s.kv_bytes_per_token == 27 * (512 + 64) * 2  # the latent and the rope key, not 2 * heads * head_dim
    q = 2048 * 16 * (128 + 64)
    attention = q + 2048 * (512 + 64) + 512 * 16 * (128 + 128) + 16 * 128 * 2048
    params = 27 * attention + 1 * 3 * 2048 * 10944 + 26 * 2 * 3 * 2048 * 1408
    assert s.dense_bytes == params * 2 + 26 * 64 * 2048 * 2 + 102400 * 2048 * 2
    assert s.group_limits == (0, 0)
    # DeepSeek-V2 proper limits groups (group_limited_greedy, 8 groups, 3 per token): the shape carries them
    limited = shape_from_config({**cfg, "n_routed_experts": 160, "topk_method": "group_limited_greedy", "n_group": 8,
                                 "topk_group": 3}, "v2", "")
    assert (limited.n_group, limited.topk_group) == (8, 3) and limited.group_limits == (8, 3)
    assert limited.to_manifest()["n_group"] == 8


def test_group_limits_follow_the_config_and_leave_catalogue_manifests_alone():
    t = pytest.importorskip("transformers")
    v3 = t.DeepseekV3Config(dtype="bfloat16").to_dict()  # n_group 8, topk_group 4: DeepSeek-V3's own
    same = shape_from_config(v3, "v3", "")
    assert same.n_group is None and same.group_limits == (8, 4)
    assert "n_group" not in same.to_manifest() and "n_group" not in MODELS["deepseek-v3.1"].to_manifest()
    off = shape_from_config({**v3, "n_group": 1, "topk_group": 1}, "v3-no-groups", "")  # Moonlight-style
    assert (off.n_group, off.topk_group) == (0, 0) and off.group_limits == (0, 0)
    m = off.to_manifest()
    assert (m["n_group"], m["topk_group"]) == (0, 0) and ModelShape.from_manifest(m) == off
    with pytest.raises(EcoSimError, match="n_group 7 must divide the 256 experts"):
        shape_from_config({**v3, "n_group": 7}, "bad", "")


def test_other_families_read():
    t = pytest.importorskip("transformers")
    phi = shape_from_config(t.PhimoeConfig(dtype="bfloat16").to_dict(), "phi", "")  # 32 layers, 16 experts top-2
    assert (phi.num_layers, len(phi.moe_layers), phi.num_experts, phi.top_k) == (32, 32, 16, 2)
    assert phi.expert_bytes == 3 * 4096 * 6400 * 2
    granite = shape_from_config(t.GraniteMoeConfig(dtype="bfloat16").to_dict(), "granite", "")
    assert (granite.num_experts, granite.top_k, granite.moe_intermediate_size) == (8, 2, 11008)
    bf16_oss = shape_from_config(t.GptOssConfig(dtype="bfloat16").to_dict(), "oss", "")  # no MXFP4: BF16 experts
    assert bf16_oss.expert_bytes == 3 * 2880 * 2880 * 2 and bf16_oss.bytes_per_param == 2.0


@pytest.mark.parametrize("cfg, needle", [
    ({"model_type": "llama", "hidden_size": 8}, "not a supported MoE model type"),
    ({"hidden_size": 8}, "not a supported MoE model type"),
    ({"model_type": "qwen2_moe", "num_experts": 0, "hidden_size": 8}, "not a MoE model"),
    ({"model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2, "hidden_size": 8,
      "num_hidden_layers": 2, "vocab_size": 16, "num_attention_heads": 2, "intermediate_size": 4,
      "quantization_config": {"quant_method": "awq"}}, "quant_method 'awq' is not supported"),
    ({"model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2, "hidden_size": 8,
      "num_hidden_layers": 2, "vocab_size": 16, "num_attention_heads": 2, "intermediate_size": 4,
      "dtype": "int8"}, "dtype 'int8'"),
    ({"model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2}, "no num_hidden_layers"),
    ({"model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 9}, "num_experts_per_tok 9"),
])
def test_what_is_refused(cfg, needle):
    with pytest.raises(EcoSimError, match=needle) as e:
        shape_from_config(cfg, "x", "")
    assert "\n" not in str(e.value)
    if "supported MoE" in needle:
        assert all(t in str(e.value) for t in SUPPORTED)


TINY = {"model_type": "qwen3_moe", "num_hidden_layers": 2, "num_experts": 8, "num_experts_per_tok": 2,
        "hidden_size": 64, "moe_intermediate_size": 32, "intermediate_size": 128, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256, "dtype": "bfloat16"}


def test_get_model_reads_a_config_path(tmp_path):
    d = tmp_path / "my-moe"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(TINY))
    by_dir, by_file = get_model(str(d)), get_model(str(d / "config.json"))
    assert by_dir == by_file and by_dir.name == "my-moe" and by_dir.source == str(d / "config.json")
    (tmp_path / "other.json").write_text(json.dumps(TINY))
    assert dataclasses.replace(get_model(str(tmp_path / "other.json")), name="my-moe", source=by_dir.source) == by_dir
    assert get_model("DeepSeek-V3") is MODELS["deepseek-v3.1"]  # names and aliases first, as before
    for bad, needle in [(tmp_path / "missing.json", "no such file"), (tmp_path / "nothing", "no such file"),
                        ("gpt-9", "unknown model shape")]:
        with pytest.raises(EcoSimError, match=needle):
            get_model(str(bad))
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(EcoSimError, match="not a readable config.json"):
        get_model(str(tmp_path / "broken.json"))


def _ecosim(*args: str) -> int:
    return ecosim_main([str(a) for a in args])


def test_synth_and_replay_a_config_end_to_end(tmp_path, capsys):
    d = tmp_path / "tiny-moe"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(TINY))
    out = tmp_path / "trace"
    # no shipped preset for "tiny-moe": synth uses the default knobs
    assert _ecosim("synth", out, "--model", d, "--requests", "2", "--positions", "8") == 0
    assert "(defaults)" in capsys.readouterr().out
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"]["name"] == "tiny-moe" and manifest["model"]["family"] == "qwen3_moe"
    assert _ecosim("replay", out) == 0


@pytest.mark.parametrize("model, needle", [
    ("dense", "not a supported MoE model type"),
    ("missing", "no such file"),
])
def test_cli_refuses_a_bad_config_in_one_line(tmp_path, capsys, model, needle):
    (tmp_path / "dense").mkdir()
    (tmp_path / "dense" / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    code = _ecosim("synth", tmp_path / "out", "--model", tmp_path / model)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("ecosim: error: ") and "Traceback" not in err
    assert needle in lines[0]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_trace_checks_the_group_limits_it_carries(tmp_path):
    from ecosim.trace.io import read_trace

    d = tmp_path / "v3-no-groups"
    d.mkdir()
    t = pytest.importorskip("transformers")
    cfg = t.DeepseekV3Config(num_hidden_layers=3, first_k_dense_replace=1, n_routed_experts=16, num_experts_per_tok=2,
                             hidden_size=64, moe_intermediate_size=32, intermediate_size=128, q_lora_rank=None,
                             kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                             num_attention_heads=4, vocab_size=256, n_group=1, topk_group=1, dtype="bfloat16")
    (d / "config.json").write_text(json.dumps(cfg.to_dict()))
    out = tmp_path / "trace"
    assert _ecosim("synth", out, "--model", d, "--requests", "1", "--positions", "4") == 0
    assert read_trace(out).manifest["model"]["n_group"] == 0
    m = json.loads((out / "manifest.json").read_text())
    m["model"]["n_group"] = 3  # does not divide 16 experts
    (out / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(EcoSimError, match="n_group"):
        read_trace(out)


@pytest.mark.parametrize("change, needle", [
    ({"num_attention_heads": 0}, "num_attention_heads must be at least 1"),
    ({"hidden_size": 0}, "hidden_size must be at least 1"),
    ({"mlp_only_layers": 3}, "mlp_only_layers must be a list of layer indices"),
    ({"mlp_only_layers": ["a"]}, "mlp_only_layers must be a list of layer indices"),
    ({"dtype": ["bfloat16"]}, "dtype"),
    ({"num_experts_per_tok": 9}, "num_experts_per_tok 9 must lie in"),
])
def test_a_malformed_config_is_one_error_naming_its_file(tmp_path, change, needle):
    cfg = {"model_type": "qwen3_moe", "num_hidden_layers": 2, "num_experts": 8, "num_experts_per_tok": 2,
           "hidden_size": 64, "moe_intermediate_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
           "vocab_size": 128, **change}
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(EcoSimError, match=needle) as e:
        get_model(str(tmp_path / "m"))
    assert str(e.value).startswith(str(tmp_path / "m" / "config.json"))


def test_a_config_folder_named_like_a_catalogue_shape_gets_its_preset_only_if_it_routes_like_it(tmp_path):
    """A shipped preset is fitted for a catalogue shape's experts and top-k: a folder that only borrows the name
    routes with the generator's defaults (or a preset given), never that shape's."""
    from ecosim.routing.presets import shipped_preset
    t = pytest.importorskip("transformers")
    same = tmp_path / "a" / "qwen3-30b-a3b"
    other = tmp_path / "b" / "qwen3-30b-a3b"
    for d, experts, k in ((same, 128, 8), (other, 8, 2)):
        d.mkdir(parents=True)
        cfg = t.Qwen3MoeConfig(num_hidden_layers=2, hidden_size=64, moe_intermediate_size=32, num_attention_heads=4,
                               num_key_value_heads=2, head_dim=16, num_experts=experts, num_experts_per_tok=k,
                               vocab_size=256, dtype="bfloat16").to_dict()
        (d / "config.json").write_text(json.dumps(cfg))
    assert shipped_preset("qwen3-30b-a3b") == "qwen3-30b-a3b" and shipped_preset(get_model(str(same))) == "qwen3-30b-a3b"
    assert shipped_preset(get_model(str(other))) is None
    out = tmp_path / "trace"
    assert _ecosim("synth", out, "--model", other, "--requests", "1", "--positions", "4") == 0
    assert json.loads((out / "manifest.json").read_text())["provenance"]["source"] == "ecosim synth (defaults)"


def test_one_group_limit_rule_for_configs_manifests_and_the_router():
    from ecosim.catalog.shape import group_limit_problem
    from ecosim.routing.generator import Router, RoutingKnobs
    assert group_limit_problem(0, 0, 256, 8) is None and group_limit_problem(8, 4, 256, 8) is None
    for n, t, why in ((8, 0, "topk_group 0 lie in"), (7, 4, "must divide"), (8, 9, "lie in"), (64, 1, "hold at least"),
                      (8.0, 4, "whole numbers")):
        assert why in (group_limit_problem(n, t, 256, 8) or ""), (n, t)
    with pytest.raises(EcoSimError, match="topk_group 0 lie in"):
        Router(2, 256, 8, RoutingKnobs(n_group=8, topk_group=0), 1, 0)
    t = pytest.importorskip("transformers")
    v3 = {k: v for k, v in t.DeepseekV3Config(dtype="bfloat16").to_dict().items() if k not in ("n_group", "topk_group")}
    assert shape_from_config(v3, "v3", "").group_limits == (8, 4)  # transformers' defaults where the config is silent


def test_a_preset_must_say_what_it_was_fitted_to_and_keep_its_knobs_in_range(tmp_path):
    from ecosim.routing.presets import load_preset, preset_path
    good = json.loads(preset_path("qwen3-30b-a3b").read_text())
    for bad, needle in (({k: v for k, v in good.items() if k != "source"}, "not a synth preset"),
                        ({**good, "knobs": {**good["knobs"], "token_affinity": 0.9, "parent_affinity": 0.9}}, "out of range"),
                        ({**good, "knobs": {**good["knobs"], "skew": "high"}}, "not a synth preset")):
        p = tmp_path / "p.json"
        p.write_text(json.dumps(bad))
        with pytest.raises(EcoSimError, match=needle):
            load_preset(str(p))


def test_kimi_k2_is_read_as_the_deepseek_v3_architecture_it_reuses():
    """Kimi-K2's config.json names model_type kimi_k2 over DeepSeek-V3's architecture (its deploy guidance): the
    same fields give the same arithmetic, here with its 384 experts, one dense layer, 64 heads and no groups."""
    t = pytest.importorskip("transformers")
    kimi = {**t.DeepseekV3Config(num_hidden_layers=61, first_k_dense_replace=1, n_routed_experts=384, n_shared_experts=1,
                                 num_experts_per_tok=8, hidden_size=7168, moe_intermediate_size=2048,
                                 intermediate_size=18432, vocab_size=163840, q_lora_rank=1536, kv_lora_rank=512,
                                 qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, num_attention_heads=64,
                                 n_group=1, topk_group=1, quantization_config=FP8, dtype="bfloat16").to_dict(),
            "model_type": "kimi_k2"}
    s = shape_from_config(kimi, "kimi-k2", "")
    assert s == shape_from_config({**kimi, "model_type": "deepseek_v3"}, "kimi-k2", "")
    assert (s.family, s.attention, s.group_limits, s.num_experts, len(s.moe_layers)) == ("deepseek_v3", "mla", (0, 0), 384, 60)
    assert s.expert_bytes == 3 * 7168 * 2048  # FP8: one byte a weight
