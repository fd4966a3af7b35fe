"""The committed sampled traces (traces-sampled/): real recordings of the committed pair at temperature 0.7, one per
task kind, that replay exactly under target-only verification; sampling halves what the same draft gets accepted."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT

from ecosim.trace import check_trace, read_trace

TASKS = ("coding", "reasoning", "qa", "dialogue")


@pytest.mark.parametrize("task", TASKS)
def test_a_sampled_trace_is_valid_real_and_says_how_it_was_sampled(task):
    path = ROOT / "traces-sampled" / task
    m = check_trace(path)  # continuity included: each root is the sample the previous root's target_next drew
    assert m["version"] == 3 and m["synthetic"] is False
    assert m["decoding"] == {"mode": "sample", "temperature": 0.7, "top_p": 1.0, "top_k": 0, "seed": 0,
                             "verify": "target-only"}
    cmd = m["recorded_on"]["command"]
    assert cmd.startswith(f"tracer record --model models/ecosim-tiny --prompts prompts/{task}.jsonl --out traces-sampled/{task}")
    assert "--temperature 0.7" in cmd
    greedy = json.loads((ROOT / "traces" / task / "manifest.json").read_text())
    assert [r["prompt_ids"] for r in m["requests"]] == [r["prompt_ids"] for r in greedy["requests"][:4]]


def test_sampling_at_0_7_accepts_less_than_greedy_on_the_same_prompts():
    pytest.importorskip("torch")
    from tracer.acceptance import compare

    for task in TASKS:
        g, s = str(ROOT / "traces" / task), str(ROOT / "traces-sampled" / task)
        res = compare([g, s])
        assert res[s]["tokens_per_step"] < 0.75 * res[g]["tokens_per_step"], (task, res)
        assert res[s]["tokens_per_step"] > 1.5, (task, res)  # still worth drafting for
