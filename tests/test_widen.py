"""tracer.widen: the widened replica computes the same function with the same routing."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers import AutoModelForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM  # noqa: E402

from tracer.widen import build_replica, expert_bytes, expert_modules, main, widen_experts  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TRAINED = REPO / "models" / "ecosim-tiny" / "target"


def tiny_config(**kw) -> Qwen3MoeConfig:
    base = dict(
        vocab_size=160, hidden_size=48, intermediate_size=96, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=12, max_position_embeddings=256,
        num_experts=8, num_experts_per_tok=2, moe_intermediate_size=16, norm_topk_prob=True,
        decoder_sparse_step=1, mlp_only_layers=[], tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )
    base.update(kw)
    return Qwen3MoeConfig(**base)


def tiny_model(seed: int = 0, **kw):
    torch.manual_seed(seed)
    m = Qwen3MoeForCausalLM._from_config(tiny_config(**kw), attn_implementation="eager", dtype=torch.float32)
    # default init gives a near-uniform router; sharpen it so routing depends on the input
    with torch.no_grad():
        for layer in m.model.layers:
            if hasattr(layer.mlp, "gate"):
                layer.mlp.gate.weight.normal_(0.0, 0.5)
    return m.eval()


@torch.no_grad()
def run(model, ids):
    """Logits and the experts the routers actually chose (forward hooks on mlp.gate, output[2])."""
    chosen, hooks = [], []
    for layer in model.model.layers:
        if hasattr(layer.mlp, "gate"):
            hooks.append(layer.mlp.gate.register_forward_hook(
                lambda mod, inp, out: chosen.append(torch.sort(out[2], -1).values)))
    try:
        out = model(input_ids=ids, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    return out.logits, chosen


def random_ids(model, n=40, batch=2, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, model.config.vocab_size, (batch, n), generator=g)


def assert_same(model_a, model_b, ids, atol=1e-5):
    la, ra = run(model_a, ids)
    lb, rb = run(model_b, ids)
    assert la.shape == lb.shape
    assert len(ra) == len(rb) > 0
    for a, b in zip(ra, rb):
        assert torch.equal(a, b), "routing changed"
    diff = float((la - lb).abs().max())
    assert diff <= atol, f"max |logit diff| {diff}"
    assert torch.equal(la.argmax(-1), lb.argmax(-1))
    return diff


@pytest.mark.parametrize("factor", [2, 5])
def test_widened_layout(factor):
    m = tiny_model()
    orig = {n: (mod.gate_up_proj.detach().clone(), mod.down_proj.detach().clone()) for n, mod in expert_modules(m)}
    b0 = expert_bytes(m)
    widen_experts(m, factor, seed=3)
    I, H, E = 16, 48, 8
    assert m.config.moe_intermediate_size == I * factor
    assert expert_bytes(m) == b0 * factor
    for n, mod in expert_modules(m):
        gu0, dn0 = orig[n]
        assert tuple(mod.gate_up_proj.shape) == (E, 2 * I * factor, H)
        assert tuple(mod.down_proj.shape) == (E, H, I * factor)
        # gate rows first, then up rows: the originals sit at the start of each half
        assert torch.equal(mod.gate_up_proj[:, :I], gu0[:, :I])
        assert torch.equal(mod.gate_up_proj[:, I * factor : I * factor + I], gu0[:, I:])
        assert torch.equal(mod.down_proj[:, :, :I], dn0)
        assert not mod.down_proj[:, :, I:].any(), "extra down-projection columns must be zero"
        assert mod.gate_up_proj[:, I : I * factor].abs().sum() > 0, "extra gate rows are random"
        assert torch.isfinite(mod.gate_up_proj).all()


@pytest.mark.parametrize("impl", ["eager", "grouped_mm"])
def test_widened_same_logits_and_routing(impl):
    a, b = tiny_model(), tiny_model()
    widen_experts(b, 16, seed=0)
    for m in (a, b):
        m.set_experts_implementation(impl)
    ids = random_ids(a)
    assert_same(a, b, ids)


def test_widened_same_with_dense_layers_and_greedy_decode():
    kw = dict(mlp_only_layers=[1])
    a, b = tiny_model(seed=4, **kw), tiny_model(seed=4, **kw)
    widen_experts(b, 8, seed=1)
    assert len(expert_modules(b)) == 2
    ids = random_ids(a, n=12, batch=1, seed=5)
    assert_same(a, b, ids)
    ga = a.generate(ids, max_new_tokens=24, do_sample=False, pad_token_id=0, eos_token_id=None)
    gb = b.generate(ids, max_new_tokens=24, do_sample=False, pad_token_id=0, eos_token_id=None)
    assert torch.equal(ga, gb)


def test_replica_checkpoint_roundtrip(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "wide"
    a = tiny_model(seed=2)
    a.save_pretrained(src)
    rep = build_replica(src, 4, dst, seed=0)
    assert rep["check"]["routing_identical"] and rep["check"]["max_abs_logit_diff"] < 1e-5
    assert rep["moe_intermediate_size"] == [16, 64]
    b = AutoModelForCausalLM.from_pretrained(dst, dtype=torch.float32).eval()
    assert b.config.moe_intermediate_size == 64
    assert b.config.intermediate_size == 96  # the dense MLP size is left alone
    for _, mod in expert_modules(b):
        assert not mod.down_proj[:, :, 16:].any()
    a.set_experts_implementation("eager")
    b.set_experts_implementation("eager")
    assert_same(a, b, random_ids(a, seed=7))


def test_rejects_bad_input():
    m = tiny_model()
    with pytest.raises(ValueError):
        widen_experts(m, 0)
    with pytest.raises(ValueError):
        widen_experts(m, 1.5)
    from transformers import Qwen3Config, Qwen3ForCausalLM

    dense = Qwen3ForCausalLM._from_config(Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64,
                                                      num_hidden_layers=1, num_attention_heads=2,
                                                      num_key_value_heads=1, head_dim=16))
    with pytest.raises(ValueError):
        widen_experts(dense, 2)


@pytest.mark.skipif(not (TRAINED / "config.json").is_file(), reason="models/ecosim-tiny not trained")
def test_trained_target_widened_x16():
    from transformers import AutoTokenizer

    a = AutoModelForCausalLM.from_pretrained(TRAINED, dtype=torch.float32).eval()
    b = AutoModelForCausalLM.from_pretrained(TRAINED, dtype=torch.float32).eval()
    widen_experts(b, 16, seed=0)
    assert b.config.moe_intermediate_size == 16 * a.config.moe_intermediate_size
    tok = AutoTokenizer.from_pretrained(TRAINED)
    text = "def parse_header_line(line):\n    name, sep, value = line.partition(':')\n    if not sep:\n"
    ids = torch.tensor([tok(text)["input_ids"]])
    assert_same(a, b, ids, atol=1e-4)
    ga = a.generate(ids, max_new_tokens=24, do_sample=False, pad_token_id=0, eos_token_id=None)
    gb = b.generate(ids, max_new_tokens=24, do_sample=False, pad_token_id=0, eos_token_id=None)
    assert torch.equal(ga, gb)


@pytest.mark.skipif(not (TRAINED / "config.json").is_file(), reason="models/ecosim-tiny not trained")
def test_cli_on_trained_target(tmp_path):
    out = tmp_path / "x4"
    assert main(["--model", str(TRAINED), "--factor", "4", "--out", str(out)]) == 0
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    b = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    a = AutoModelForCausalLM.from_pretrained(TRAINED, dtype=torch.float32).eval()
    assert_same(a, b, random_ids(a, n=48, batch=1), atol=1e-4)
