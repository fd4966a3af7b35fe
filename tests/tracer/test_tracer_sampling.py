"""Sampled recordings (tracer/sampler.py): the continuation is the target's own sample at T, and a node on it draws
what the continuation drew, so greedy replay's rule replays it exactly (target-only verification)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from ecosim.errors import EcoSimError
from ecosim.trace.io import check_trace, read_trace
from tracer.errors import TracerError
from tracer.record import RecordConfig, run_record
from tracer.sampler import Sampler


def _record(tmp_path: Path, model: Path, prompts: Path, name: str = "trace", **kw) -> Path:
    opts = dict(max_new_tokens=12, depth=3, topk=3, max_nodes=12, chunk=5, progress=False, threads=1,
                stop_at_eos=False)
    opts.update(kw)
    return run_record(RecordConfig(model=str(model), prompts=[prompts], out=tmp_path / name, **opts))


def test_the_sampler_by_hand():
    """logits log(0.5, 0.3, 0.15, 0.05) at T = 1: top-k 2 keeps (0.5, 0.3) -> (0.625, 0.375); top-p 0.7 keeps the
    smallest prefix reaching 0.7, (0.5, 0.3); at T = 0.5 the probabilities are squared and renormalised."""
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert Sampler(1.0).probs(logits)[0].tolist() == pytest.approx([0.5, 0.3, 0.15, 0.05])
    assert Sampler(1.0, top_k=2).probs(logits)[0].tolist() == pytest.approx([0.625, 0.375, 0, 0])
    assert Sampler(1.0, top_p=0.7).probs(logits)[0].tolist() == pytest.approx([0.625, 0.375, 0, 0])
    sq = np.array([0.25, 0.09, 0.0225, 0.0025])
    assert Sampler(0.5).probs(logits)[0].tolist() == pytest.approx((sq / sq.sum()).tolist())
    assert Sampler().draw(logits, 0, np.array([0])).tolist() == [0]  # T = 0: the argmax


def test_draws_follow_the_distribution_and_the_same_index_draws_the_same_token():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    s = Sampler(1.0, seed=3)
    draws = np.array([s.draw(logits, 0, np.array([n]))[0] for n in range(4000)])
    freq = np.bincount(draws, minlength=4) / len(draws)
    assert freq == pytest.approx([0.5, 0.3, 0.15, 0.05], abs=0.03)  # 4,000 fixed draws: a deterministic check
    both = s.draw(torch.cat([logits, logits]), 7, np.array([11, 11]))
    assert both[0] == both[1] == s.draw(logits, 7, np.array([11]))[0]


def test_a_sampled_trace_replays_exactly(tiny_dirs, prompts_file, tmp_path):
    """Draft = target, T = 0.8 among the 3 most probable tokens, trees of the 3 best children: the sample is always a
    child. The trace is version 3 with its decoding; the roots are the target's sequential sample with the same
    random numbers; every node whose path follows the continuation drew the continuation's next token, which is
    what lets the greedy rule (child accepted iff token == parent's target_next) replay it."""
    target = tiny_dirs["qwen3_moe"] / "target"
    sampler = Sampler(0.8, top_k=3, seed=5)
    out = _record(tmp_path, tiny_dirs["qwen3_moe"], prompts_file, draft=str(target), sampler=sampler)
    m = check_trace(out)
    assert m["version"] == 3 and m["decoding"] == {"mode": "sample", "temperature": 0.8, "top_p": 1.0, "top_k": 3,
                                                  "seed": 5, "verify": "target-only"}
    t = read_trace(out)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(target, use_safetensors=True).eval()
    followed = 0
    for req in m["requests"]:
        rid, prompt = req["request_id"], req["prompt_ids"]
        mine = t.nodes["request_id"] == rid
        roots = t.nodes["token"][mine & (t.nodes["node"] == 0)].tolist()
        seq = list(prompt)
        with torch.inference_mode():  # the target's own sample, one token at a time
            for n in range(len(roots)):
                logits = model(torch.tensor([seq])).logits[0, -1:]
                seq.append(int(sampler.draw(logits, rid, np.array([n]))[0]))
        assert roots == seq[len(prompt):]
        for pos in range(req["positions"]):
            rows = np.flatnonzero(mine & (t.nodes["pos"] == pos))
            tok, par, nxt, dep = (t.nodes[k][rows] for k in ("token", "parent", "target_next", "depth"))
            node = 0
            while True:  # walk down the continuation
                kids = [c for c in range(len(rows)) if par[c] == node and tok[c] == nxt[node]]
                if not kids:
                    break
                node = kids[0]
                if pos + dep[node] + 1 < len(roots):
                    assert nxt[node] == roots[pos + dep[node] + 1]
                    followed += 1
    assert followed > 40  # nearly every position, down to the full depth


def test_same_seed_same_trace_and_bad_sampling_options_refused(tiny_dirs, prompts_file, tmp_path):
    a = _record(tmp_path, tiny_dirs["olmoe"], prompts_file, "a", sampler=Sampler(1.0, seed=2), max_new_tokens=6)
    b = _record(tmp_path, tiny_dirs["olmoe"], prompts_file, "b", sampler=Sampler(1.0, seed=2), max_new_tokens=6)
    assert np.array_equal(read_trace(a).nodes["target_next"], read_trace(b).nodes["target_next"])
    for bad in (Sampler(-1.0), Sampler(1.0, top_p=0.0), Sampler(0.0, top_p=0.9), Sampler(1.0, seed=-1)):
        with pytest.raises(TracerError):
            RecordConfig(model="m", prompts=[prompts_file], out=tmp_path / "x", sampler=bad).check()


def test_a_sampled_decoding_needs_version_3_and_a_known_rule(tmp_path):
    from ecosim.catalog.models import get_model
    from ecosim.synth import SynthConfig, synthesize
    from ecosim.trace.checks import check_manifest
    from ecosim.trace.write import full_manifest

    m, _, _ = synthesize(get_model("olmoe-1b-7b"), SynthConfig(requests=1, positions=4, depth=2, topk=2, max_nodes=3))
    sampled = full_manifest({**m, "decoding": {"mode": "sample", "temperature": 0.7, "verify": "target-only"}})
    assert sampled["version"] == 3
    check_manifest(sampled)
    for change, needle in (({"version": 2}, "version 3"), ({"decoding": {"mode": "sample", "temperature": 0.7}}, "verify"),
                           ({"decoding": {"mode": "sample", "temperature": 0, "verify": "target-only"}}, "temperature"),
                           ({"decoding": {"mode": "beam"}}, "sample")):
        with pytest.raises(EcoSimError, match=needle):
            check_manifest({**sampled, **change})
