"""Recorded traces: valid, continuous, equal to greedy `generate`, and right about the draft."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
import torch

import tracer.pair
from ecosim.catalog.models import ModelShape
from ecosim.trace.io import check_trace, read_trace
from tracer.record import RecordConfig, run_record
from tracer.tiny import FAMILIES


def _record(tmp_path: Path, model: Path, prompts: Path, name: str = "trace", **kw) -> Path:
    opts = dict(max_new_tokens=10, depth=3, topk=2, max_nodes=8, chunk=4, progress=False, threads=1)
    opts.update(kw)
    return run_record(RecordConfig(model=str(model), prompts=[prompts], out=tmp_path / name, **opts))


def _trees(t):
    s = t.tree_start
    for i in range(t.n_trees):
        yield {k: v[s[i]:s[i + 1]] for k, v in t.nodes.items()}


@pytest.mark.parametrize("family", FAMILIES)
def test_trace_is_valid_and_follows_greedy_generate(family, tiny_dirs, prompts_file, tmp_path):
    out = _record(tmp_path, tiny_dirs[family], prompts_file)
    manifest = check_trace(out)  # every invariant, continuity included
    t = read_trace(out)
    assert manifest["recorded_on"]["complete"] is True and manifest["synthetic"] is False
    # every shape field; act_quant only where true (ModelShape.to_manifest keeps older fingerprints)
    assert set(manifest["model"]) == {f.name for f in fields(ModelShape)} - {"act_quant", "n_group", "topk_group"}
    assert ModelShape.from_manifest(manifest["model"]).act_quant is False
    assert manifest["model"]["family"] == family and manifest["tree"] == {"depth": 3, "topk": 2, "max_nodes": 8}
    assert {"name", "params", "bytes"} <= set(manifest["draft"])
    assert {"device", "torch", "transformers", "date", "command"} <= set(manifest["recorded_on"])
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_dirs[family] / "target", use_safetensors=True).eval()
    for req in manifest["requests"]:
        prompt = req["prompt_ids"]
        rows = t.positions["request_id"] == req["request_id"]
        assert np.array_equal(t.positions["context_len"][rows], len(prompt) + np.arange(req["positions"]))
        roots = t.nodes["token"][(t.nodes["node"] == 0) & (t.nodes["request_id"] == req["request_id"])]
        with torch.inference_mode():
            gen = model.generate(torch.tensor([prompt]), max_new_tokens=10, do_sample=False)[0, len(prompt):]
        assert roots.tolist() == gen[: req["positions"]].tolist(), f"{family} request {req['request_id']}"
        assert req["positions"] == 10 or int(gen[req["positions"]]) in (model.generation_config.eos_token_id,)


def test_manifest_bytes_come_from_the_tensors(tiny_dirs, prompts_file, tmp_path):
    out = _record(tmp_path, tiny_dirs["deepseek_v3"], prompts_file, max_new_tokens=2)
    m = check_trace(out)["model"]
    h, i = 64, 32  # tiny hidden and moe_intermediate; fp32 weights
    assert m["expert_bytes"] == 3 * h * i * 4
    assert m["moe_layers"] == [1, 2] and m["num_experts"] == 16 and m["top_k"] == 4 and m["num_shared_experts"] == 1
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_dirs["deepseek_v3"] / "target", use_safetensors=True)
    total = sum(p.numel() * 4 for p in model.parameters()) + sum(
        b.numel() * 4 for n, b in model.named_buffers() if "e_score_correction_bias" in n)
    embed = model.get_input_embeddings().weight.numel() * 4
    assert m["dense_bytes"] == total - embed - 2 * 16 * m["expert_bytes"]


@pytest.mark.parametrize("family", FAMILIES)
def test_draft_equal_to_target_is_always_accepted(family, tiny_dirs, prompts_file, tmp_path):
    """Draft = target: every top-1 chain is accepted to full depth; every q equals p."""
    target = tiny_dirs[family] / "target"
    out = _record(tmp_path, tiny_dirs[family], prompts_file, draft=str(target), depth=4, topk=1, max_nodes=4)
    t = read_trace(out)
    for tree in _trees(t):
        assert len(tree["node"]) == 5 and tree["depth"].tolist() == [0, 1, 2, 3, 4]
        assert np.array_equal(tree["token"][1:], tree["target_next"][:-1]), "every chain node accepted"
    # a wide tree: each expanded node's top-1 child is the target's next token, and q == p
    out = _record(tmp_path, tiny_dirs[family], prompts_file, "wide", draft=str(target), depth=3, topk=3, max_nodes=12)
    t = read_trace(out)
    for tree in _trees(t):
        for node in np.unique(tree["parent"][1:]):
            kids = np.flatnonzero(tree["parent"] == node)
            assert tree["token"][kids[np.argmax(tree["draft_logprob"][kids])]] == tree["target_next"][node]
        np.testing.assert_allclose(tree["draft_logprob"][1:], tree["target_logprob"][1:], atol=1e-4)


def test_early_exit_draft(tiny_dirs, prompts_file, tmp_path):
    out = _record(tmp_path, tiny_dirs["olmoe"], prompts_file, draft="early-exit:1")
    m = check_trace(out)
    assert m["draft"]["kind"] == "early-exit" and m["draft"]["layers"] == 1
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_dirs["olmoe"] / "target", use_safetensors=True)
    parts = [model.model.embed_tokens, model.model.layers[0], model.model.norm, model.lm_head]
    assert m["draft"]["params"] == sum(p.numel() for part in parts for p in part.parameters())


def test_stops_at_eos_and_resume_knows_it_is_done(tiny_dirs, prompts_file, tmp_path, monkeypatch):
    full = read_trace(_record(tmp_path, tiny_dirs["qwen3_moe"], prompts_file, "full", max_prompts=1, stop_at_eos=False))
    roots = full.nodes["token"][full.nodes["node"] == 0].tolist()
    cut = next(p for p in range(1, len(roots)) if roots[p] not in roots[:p])
    monkeypatch.setattr(tracer.pair, "eos_ids", lambda model, tok: frozenset([roots[cut]]))
    out = _record(tmp_path, tiny_dirs["qwen3_moe"], prompts_file, "eos", max_prompts=1)
    t = read_trace(out)
    assert t.manifest["requests"][0]["positions"] == cut
    assert t.nodes["token"][t.nodes["node"] == 0].tolist() == roots[:cut]
    again = read_trace(_record(tmp_path, tiny_dirs["qwen3_moe"], prompts_file, "eos", max_prompts=1, resume=True))
    assert again.manifest["requests"][0]["positions"] == cut
