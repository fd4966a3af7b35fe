"""Draft kinds: each head's forward equals a plain step-by-step re-implementation, each records a
trace `ecosim check` accepts, each says in one line what it lacks, and each prices its own reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ecosim.trace.io import check_trace
from tracer.drafts.registry import KINDS, parse
from tracer.errors import TracerError
from tracer.pair import load_pair
from tracer.record import RecordConfig, run_record
from tracer.tiny import add_mtp_layer, write_eagle3, write_tiny
from tracer.tree import expand_tree

from tracer.cli import main


def run_main(argv: list[str], capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        main(argv)
        raise SystemExit(0)
    return e.value.code, capsys.readouterr().err


def one_line_error(code: int, err: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("tracer: error: "), err
    return lines[0]


# -- fixtures: a tiny Qwen3-MoE with an EAGLE-3 head; a tiny DeepSeek-V3 with and without MTP ----
@pytest.fixture(scope="module")
def eagle3_dir(tiny_dirs, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("eagle3")
    write_eagle3(tiny_dirs["qwen3_moe"] / "target", out, seed=3)
    return out


@pytest.fixture(scope="module")
def mtp_dir(tmp_path_factory):
    root = write_tiny("deepseek_v3", tmp_path_factory.mktemp("ds_mtp") / "ds", seed=5)
    module = add_mtp_layer(root / "target", seed=7)
    return root, module


def _rms(x, w, eps):
    return w * (x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _context(pair, n=9):
    ctx = torch.tensor([1] + list(range(40, 40 + n - 1)))
    pair.target.reset()
    pair.draft.reset()
    pair.target.extend(ctx)
    pair.draft.extend(ctx)
    root = int(pair.target.forward(torch.tensor([50]), torch.tensor([n]), torch.ones(1, 1, dtype=torch.bool), n)[-1].argmax())
    pair.target.keep(n)  # the root's token is 50's argmax; re-feed it as the root below
    return ctx, root


def _tree_logprobs(tree, plain_logprob):
    """For every non-root node: (its recorded draft log-prob, the plain one for its path)."""
    for v in range(1, len(tree)):
        path = tree.path(int(tree.parents[v]))  # root .. parent
        yield float(tree.draft_logprob[v]), float(plain_logprob(path)[int(tree.tokens[v])])


# -- EAGLE-3 ---------------------------------------------------------------------------------
def test_eagle3_head_equals_a_plain_reimplementation(tiny_dirs, eagle3_dir):
    pair = load_pair(str(tiny_dirs["qwen3_moe"]), f"eagle3:{eagle3_dir}")
    assert pair.draft_info["kind"] == "eagle3"
    ctx, root = _context(pair)
    tree = expand_tree(pair.draft, root, depth=3, topk=2, max_nodes=100, vocab=pair.target.vocab_size)
    assert len(tree) == 1 + 2 + 4 + 4

    cfg = json.loads((eagle3_dir / "config.json").read_text())
    from safetensors.torch import load_file

    w = load_file(str(eagle3_dir / "model.safetensors"))
    target = pair.target.model
    layers = cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    nh, nkv, d, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"], cfg["rms_norm_eps"]
    ids_map = torch.arange(cfg["draft_vocab_size"]) + w["d2t"]

    def rope(x, p):  # x (n, heads, d), rotate-half, theta 10000
        inv = 1.0 / 10000.0 ** (torch.arange(0, d, 2).float() / d)
        a = torch.cat([p[:, None] * inv, p[:, None] * inv], -1)[:, None, :]
        return x * a.cos() + torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1) * a.sin()

    @torch.inference_mode()
    def plain_logprob(path):
        """Run the head position by position, recomputing all keys each time (no cache)."""
        seq = ctx.tolist() + path
        outs = {}  # each chosen decoder layer's output (before the final norm, for the last layer too)
        hooks = [target.model.layers[i].register_forward_hook(lambda m, a, o, i=i: outs.__setitem__(i, o)) for i in layers]
        with torch.inference_mode():
            target(torch.tensor([seq[: len(ctx) + 1]]))
        for hk in hooks:
            hk.remove()
        feats = torch.cat([outs[i][0] for i in layers], -1)
        emb = target.get_input_embeddings()(torch.tensor(seq))
        gs = []  # the head's input feature at each position
        for p in range(len(seq)):
            if p == 0:
                gs.append(torch.zeros(cfg["hidden_size"]))
            elif p <= len(ctx):
                gs.append(feats[p - 1] @ w["fc.weight"].T)
            else:
                gs.append(out_h)
            g = torch.stack(gs)
            x = torch.cat([_rms(emb[: p + 1], w["midlayer.input_layernorm.weight"], eps),
                           _rms(g, w["midlayer.hidden_norm.weight"], eps)], -1)
            pos = torch.arange(p + 1).float()
            q = rope((x @ w["midlayer.self_attn.q_proj.weight"].T).view(p + 1, nh, d), pos)
            k = rope((x @ w["midlayer.self_attn.k_proj.weight"].T).view(p + 1, nkv, d), pos)
            v = (x @ w["midlayer.self_attn.v_proj.weight"].T).view(p + 1, nkv, d)
            k, v = k.repeat_interleave(nh // nkv, 1), v.repeat_interleave(nh // nkv, 1)
            att = torch.softmax(torch.einsum("hd,khd->hk", q[-1], k) / d ** 0.5, -1)
            a = g[-1] + torch.einsum("hk,khd->hd", att, v).flatten() @ w["midlayer.self_attn.o_proj.weight"].T
            y = _rms(a, w["midlayer.post_attention_layernorm.weight"], eps)
            out_h = a + (F.silu(y @ w["midlayer.mlp.gate_proj.weight"].T) * (y @ w["midlayer.mlp.up_proj.weight"].T)) @ w["midlayer.mlp.down_proj.weight"].T
        lp = torch.log_softmax(_rms(out_h, w["norm.weight"], eps) @ w["lm_head.weight"].T, -1)
        full = torch.full((pair.target.vocab_size,), float("-inf"))
        full[ids_map] = lp
        return full

    for got, want in _tree_logprobs(tree, plain_logprob):
        assert got == pytest.approx(want, abs=2e-4)
    assert set(tree.tokens[1:].tolist()) <= set(ids_map.tolist()), "drafts only tokens of its vocabulary, mapped by d2t"


# -- MTP -------------------------------------------------------------------------------------
def test_mtp_equals_a_plain_reimplementation(mtp_dir):
    root_dir, ref = mtp_dir
    pair = load_pair(str(root_dir), "mtp")
    assert pair.draft_info["kind"] == "mtp"
    ctx, root = _context(pair)
    tree = expand_tree(pair.draft, root, depth=3, topk=2, max_nodes=100, vocab=pair.target.vocab_size)
    target = pair.target.model
    eps = target.config.rms_norm_eps
    block = ref.block  # the random module written into the checkpoint, before save and reload
    block.self_attn.layer_idx = 0

    def plain_logprob(path):
        seq = ctx.tolist() + path
        with torch.inference_mode():
            h_final = target.model(torch.tensor([seq[: len(ctx) + 1]])).last_hidden_state[0]  # after the final norm
            emb = target.get_input_embeddings()(torch.tensor(seq))
            hs, out = [], None
            for p in range(len(seq)):
                hs.append(torch.zeros(emb.shape[1]) if p == 0 else h_final[p - 1] if p <= len(ctx) else out)
                x = torch.cat([_rms(emb[: p + 1], ref.enorm.weight, eps), _rms(torch.stack(hs), ref.hnorm.weight, eps)], -1)
                x = (x @ ref.eh_proj.weight.T)[None]
                pos = torch.arange(p + 1)[None]
                causal = torch.full((p + 1, p + 1), torch.finfo(x.dtype).min).triu(1)[None, None]
                y = block(x, attention_mask=causal, position_ids=pos, position_embeddings=target.model.rotary_emb(x, pos))
                y = y[0] if isinstance(y, tuple) else y
                out = _rms(y[0, -1], ref.shared_head.norm.weight, eps)
            return torch.log_softmax(out @ target.lm_head.weight.T, -1)

    for got, want in _tree_logprobs(tree, plain_logprob):
        assert got == pytest.approx(want, abs=2e-4)


# -- each kind records a valid trace and prices its own reads ---------------------------------
def _record(model: Path, prompts: Path, out: Path, draft: str) -> dict:
    run_record(RecordConfig(model=str(model), prompts=[prompts], out=out, draft=draft, max_new_tokens=6, depth=3,
                            topk=2, max_nodes=6, chunk=4, progress=False, threads=1))
    return check_trace(out)


def test_every_kind_records_a_valid_trace(tiny_dirs, eagle3_dir, mtp_dir, prompts_file, tmp_path):
    qwen, (ds, _) = tiny_dirs["qwen3_moe"], mtp_dir
    cases = {"model": (qwen, str(qwen / "draft")), "early-exit": (qwen, "early-exit:1"),
             "eagle3": (qwen, f"eagle3:{eagle3_dir}"), "mtp": (ds, "mtp")}
    assert set(cases) == set(KINDS)
    for kind, (model, draft) in cases.items():
        m = _record(model, prompts_file, tmp_path / kind, draft)
        d = m["draft"]
        assert d["kind"] == kind and d["levels"]["nodes"] == [1, 2, 2] and d["levels"]["forwards"] == [1, 1, 1]
        assert all(d["shape"]["dense_bytes"] <= b <= d["bytes"] for b in d["levels"]["bytes"])


def test_eagle3_cost_is_its_own_tensors(tiny_dirs, eagle3_dir, prompts_file, tmp_path):
    d = _record(tiny_dirs["qwen3_moe"], prompts_file, tmp_path / "e", f"eagle3:{eagle3_dir}")["draft"]
    h, t, inter, dv, v = 64, 64, 128, (259 + 1) // 2, 259  # tiny: hidden 64, heads 4 x 16, kv 2 x 16
    params = 3 * t * h + 3 * h + 2 * h * 64 + 2 * 2 * h * 32 + 64 * h + 3 * h * inter + h + dv * h
    assert d["params"] == params
    assert d["bytes"] == 4 * params + 8 * dv + v  # fp32 weights, int64 d2t, bool t2d; the embedding is a lookup
    assert d["shape"]["moe"] is None and d["levels"]["bytes"] == [d["bytes"]] * 3
    assert d["shares_target"] == ["embedding"] and d["shape"]["kv_bytes_per_token"] == 2 * 2 * 16 * 4


def test_mtp_cost_counts_the_shared_head_and_the_experts_a_level_may_wake(mtp_dir, prompts_file, tmp_path):
    root_dir, ref = mtp_dir
    d = _record(root_dir, prompts_file, tmp_path / "m", "mtp")["draft"]
    own = sum(p.numel() * 4 for p in ref.parameters()) + 16 * 4  # + the router's correction bias buffer
    head = 259 * 64 * 4  # the target's LM head, read again by every MTP step
    assert d["params"] == sum(p.numel() for p in ref.parameters()) and d["bytes"] == own + head
    moe = d["shape"]["moe"]
    assert moe == {"layers": 1, "num_experts": 16, "top_k": 4, "expert_bytes": 3 * 64 * 32 * 4}
    dense = d["bytes"] - 16 * moe["expert_bytes"]
    assert d["levels"]["bytes"] == [dense + 4 * moe["expert_bytes"], dense + 8 * moe["expert_bytes"], dense + 8 * moe["expert_bytes"]]


# -- absent weights: one line naming what is missing ------------------------------------------
def test_mtp_without_the_layer_names_what_is_missing(tiny_dirs, prompts_file, tmp_path, capsys):
    code, err = run_main(["record", "--model", str(tiny_dirs["deepseek_v3"]), "--prompts", str(prompts_file),
                             "--out", str(tmp_path / "t"), "--draft", "mtp", "--quiet"], capsys)
    line = one_line_error(code, err)
    assert "model.layers.3.eh_proj.weight" in line and "MTP" in line
    assert not (tmp_path / "t").exists()


def test_mtp_on_a_non_deepseek_target_says_so(tiny_dirs):
    with pytest.raises(TracerError, match="needs a DeepSeek-V3 target"):
        load_pair(str(tiny_dirs["qwen3_moe"]), "mtp")


def test_mtp_for_deepseek_v31_without_weights_fails_in_one_line(prompts_file, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    code, err = run_main(["record", "--model", "deepseek-v3.1", "--prompts", str(prompts_file),
                             "--out", str(tmp_path / "t"), "--draft", "mtp", "--quiet"], capsys)
    line = one_line_error(code, err)
    assert "MTP layer" in line and "deepseek-ai/DeepSeek-V3.1" in line


def test_eagle3_head_missing_a_tensor_names_it(tiny_dirs, eagle3_dir, tmp_path):
    from safetensors.torch import load_file, save_file

    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text((eagle3_dir / "config.json").read_text())
    w = load_file(str(eagle3_dir / "model.safetensors"))
    del w["fc.weight"]
    save_file(w, str(bad / "model.safetensors"))
    with pytest.raises(TracerError, match=r"lacks the tensors fc\.weight"):
        load_pair(str(tiny_dirs["qwen3_moe"]), f"eagle3:{bad}")
    with pytest.raises(TracerError, match="no such directory"):
        load_pair(str(tiny_dirs["qwen3_moe"]), f"eagle3:{tmp_path / 'nowhere'}")


@pytest.mark.parametrize("spec,msg", [("eagle3:", "expected eagle3:PATH"), ("mtp:x", "takes no argument"),
                                      ("early-exit:", "expected early-exit:N"), ("", "empty value")])
def test_bad_draft_values(spec, msg):
    with pytest.raises(TracerError, match=msg):
        parse(spec)


def test_cli_tiny_heads_then_record_with_each(prompts_file, tmp_path, capsys):
    """End to end: `tracer tiny --heads` writes both heads; `tracer record --draft ...` uses each."""
    code, _ = run_main(["tiny", "--family", "deepseek_v3", "--out", str(tmp_path / "ds"), "--heads"], capsys)
    assert code == 0 and (tmp_path / "ds" / "eagle3" / "config.json").is_file()
    for draft in ("mtp", f"eagle3:{tmp_path / 'ds' / 'eagle3'}"):
        out = tmp_path / draft.split(":")[0]
        code, err = run_main(["record", "--model", str(tmp_path / "ds"), "--prompts", str(prompts_file), "--out", str(out),
                              "--draft", draft, "--max-new-tokens", "3", "--depth", "2", "--topk", "2", "--max-nodes", "4",
                              "--threads", "1", "--quiet"], capsys)
        assert code == 0, err
        assert check_trace(out)["draft"]["kind"] == draft.split(":")[0]


def test_the_committed_eagle3_head_loads_on_its_target_and_reads_less_than_the_dense_draft():
    root = Path(__file__).resolve().parents[2] / "models" / "ecosim-tiny"
    pair = load_pair(str(root), f"eagle3:{root / 'eagle3'}")
    dense = load_pair(str(root))
    assert pair.draft_info["kind"] == "eagle3" and dense.draft_info["kind"] == "model"
    assert pair.draft_info["bytes"] < 0.75 * dense.draft_info["bytes"]  # 0.69x since the full-vocabulary head (its card)
    assert pair.draft_info["name"] == "ecosim-tiny/eagle3"
