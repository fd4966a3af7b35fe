"""The verdict `ecosim replay` ends with (ecosim/verdict.py): hand-worked cases, its invariants, and
the real command on the committed traces and on a synthetic DeepSeek-V3.1 trace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import ROOT, TINY, table_rows
from ecosim.catalog.devices import get_device
from ecosim.catalog.drafts import draft_cost
from ecosim.cost import CostConfig, CostModel
from ecosim.metrics import Row, total
from ecosim.policies import PolicySpec
from ecosim.simulate import PolicyResult
from ecosim.verdict import LEVEL, PAPER_SCALE, verdict


def _row(tokens: int, steps: int, time_s: float, draft_s: float = 0.0, levels: float = 0.0) -> Row:
    return Row("t", "real", 1, tokens, steps, steps, 0, 0.0, 0.0, time_s, draft_s=draft_s, draft_levels=levels)


def _results(times: dict[PolicySpec, tuple], tokens: int = 100) -> list[PolicyResult]:
    """One trace; each policy's (steps, seconds[, draft seconds, draft levels]) over `tokens`
    tokens, compared with `ar` and the oracle among them."""
    rows = {s: _row(tokens, *x) for s, x in times.items()}
    ar, oracle = rows[PolicySpec("ar")], rows[PolicySpec("oracle")]
    out = []
    for s, r in rows.items():
        r.compare(ar, oracle)
        out.append(PolicyResult(s, [r], total([r]).compare(ar, oracle)))
    return out


AR, CONF, AUTO, ORACLE = PolicySpec("ar"), PolicySpec("confidence", 16), PolicySpec("ecospec-auto"), PolicySpec("oracle")


def _cost(draft_time_s: float) -> CostModel:
    return CostModel(TINY, get_device("h200"), config=CostConfig(draft_time_s=draft_time_s), tree_depth=4)


def test_speculation_that_loses_names_the_draft_side_against_the_plain_step() -> None:
    # 100 tokens: ar 100 steps in 1 s (10 ms a step); confidence 25 steps in 2 s (80 ms a step, 4
    # tokens each: 20 ms/token, 0.5x); ecospec-auto declines to draft (ar's steps and time); the
    # oracle (a bound, never the verdict) 0.5 s. The draft side is 30 ms a step (--draft-time).
    res = _results({AR: (100, 1.0), CONF: (25, 2.0, 25 * 0.030, 100), AUTO: (100, 1.0), ORACLE: (50, 0.5)})
    v = verdict(res, [_cost(0.030)], ["tiny-test"])
    assert v.fastest.policy == "ar" and [e.policy for e in v.level] == ["ecospec-auto"]
    assert v.runner_up is not None and v.runner_up.policy == "confidence" and v.margin == pytest.approx(2.0)
    assert not v.speculation_pays and v.best_speculative is not None and v.best_speculative.policy == "confidence"
    w = v.why
    assert w is not None and w.overridden
    assert (w.plain_step_s, w.draft_side_s, w.step_s, w.tokens_per_step) == pytest.approx((0.010, 0.030, 0.080, 4.0))
    assert w.break_even_s == pytest.approx(0.040)  # 4 tokens x 10 ms: what a step must cost to tie ar
    head, why, paper = v.lines
    assert head.startswith("verdict: fastest on this trace: ar (plain decoding), 10 ms/token")
    assert "ecospec-auto" in head and "declines to draft" in head and "2.000x faster than the next, confidence b=16" in head
    assert why.startswith("why speculation loses: a plain step takes 10 ms") and "30 ms on the draft side (--draft-time)" in why
    assert "3 plain steps" in why and "4.000 x 10 ms = 40 ms" in why
    assert paper.endswith(PAPER_SCALE)


def test_speculation_that_pays_is_named_with_its_speedup_and_no_reason() -> None:
    # confidence: 25 steps in 0.5 s, 5 ms/token: 2x ar, the fastest by 2x over ar (ecospec-auto level with ar).
    res = _results({AR: (100, 1.0), CONF: (25, 0.5), AUTO: (100, 1.0), ORACLE: (50, 0.25)})
    v = verdict(res, [_cost(0.001)], ["deepseek-v3.1"])
    assert v.fastest.policy == "confidence" and v.fastest.speedup_vs_ar == pytest.approx(2.0) and not v.level
    assert v.runner_up is not None and v.runner_up.policy in ("ar", "ecospec-auto") and v.margin == pytest.approx(2.0)
    assert v.speculation_pays and v.why is None
    assert v.paper_scale is None  # already at the paper's shape: no command to ask it there
    assert v.lines[1] == "speculation pays: confidence b=16 runs at 2.000x plain decoding (4.000 tokens/step)"
    assert v.to_dict()["fastest"]["label"] == "confidence b=16"


def test_the_draft_side_is_what_the_policy_itself_drafted_not_the_settings_full_depth() -> None:
    """A policy that drafts one level on half its steps (DRAFTING_RULE) is charged that, not the
    setting's N: 50 steps, 25 of them drafting one level of 2 ms forwards + 5 ms bookkeeping."""
    cost = CostModel(TINY, get_device("h200"), config=CostConfig(), tree_depth=6, draft=draft_cost({"kind": "eagle3"}, TINY))
    fwd = cost.draft_forward_time()
    per = fwd + cost.spec_bookkeeping_time(1)
    res = _results({AR: (100, 1.0), CONF: (50, 3.0, 25 * per, 25), AUTO: (100, 1.0), ORACLE: (50, 0.5)})
    w = verdict(res, [cost], ["tiny-test"]).why
    assert w is not None and not w.overridden
    assert w.draft_levels == pytest.approx(0.5) and w.draft_side_s == pytest.approx(per / 2)
    assert w.draft_forwards_s == pytest.approx(fwd / 2) and w.bookkeeping_s == pytest.approx(cost.spec_bookkeeping_time(1) / 2)
    assert w.draft_side_s < cost.draft_time(True)  # the setting's six levels, which this policy never drafted


def test_ar_not_listed_is_still_the_yardstick() -> None:
    """`replay --policy confidence`: ar is replayed anyway (speedup vs ar); the verdict weighs it."""
    res = [r for r in _results({AR: (100, 1.0), CONF: (25, 2.0), ORACLE: (50, 0.5)}) if r.spec == CONF]
    v = verdict(res, [_cost(0.030)], ["tiny-test"])
    assert v.fastest.policy == "ar" and v.fastest.time_per_token_s == pytest.approx(0.010)
    assert v.runner_up is not None and v.runner_up.policy == "confidence" and v.why is not None


def test_a_paper_shape_trace_reads_the_papers_speedup_both_ways_and_splits_it() -> None:
    # 100 tokens: ar 1 s; eagle2-default 0.5 s (2x: speculation itself); ecospec-auto 0.4 s
    # (2.5x ar, 1.25x eagle2-default: cost-awareness); sglang-default 0.8 s (auto 2x over it).
    eagle2, sglang = PolicySpec("eagle2-default"), PolicySpec("sglang-default")
    res = _results({AR: (100, 1.0), AUTO: (40, 0.4), eagle2: (40, 0.5), sglang: (50, 0.8), ORACLE: (30, 0.3)})
    v = verdict(res, [_cost(0.001)], ["deepseek-v3.1"])
    (r,) = v.readings
    assert (r.paper_over_plain, r.paper_baseline, r.paper_over_baseline) == (1.62, "MTP", pytest.approx(1.62 / 1.10))
    assert (r.auto_over_ar, r.eagle2_over_ar, r.auto_over_eagle2, r.auto_over_sglang) == pytest.approx((2.5, 2.0, 1.25, 2.0))
    assert r.auto_over_ar == pytest.approx(r.eagle2_over_ar * r.auto_over_eagle2)  # the two factors multiply back
    line = v.lines[-1]
    assert "over plain decoding the paper gives 1.62x, ecospec-auto here 2.500x" in line
    assert "the paper implies 1.47x (1.62x / MTP's 1.10x), ecospec-auto here 1.250x against eagle2-default" in line
    assert v.to_dict()["readings"][0]["model"] == "deepseek-v3.1"
    assert not verdict(res, [_cost(0.001)], ["tiny-test"]).readings  # not a paper shape: no reading
    assert not verdict([x for x in res if x.spec != eagle2], [_cost(0.001)], ["deepseek-v3.1"]).readings


@given(times=st.lists(st.floats(0.1, 10.0), min_size=1, max_size=5), ar=st.floats(0.1, 10.0))
def test_the_fastest_is_the_least_time_and_level_means_within_a_tenth_of_a_percent(times: list[float], ar: float) -> None:
    specs = [PolicySpec("confidence", b) for b in range(1, len(times) + 1)]
    res = _results({AR: (100, ar), ORACLE: (50, 0.05), **{s: (50, t) for s, t in zip(specs, times)}})
    v = verdict(res, [_cost(0.0)], ["tiny-test"])
    every = [ar, *times]
    assert v.fastest.time_per_token_s == pytest.approx(min(every) / 100)
    assert all(e.time_per_token_s <= v.fastest.time_per_token_s * (1 + LEVEL) for e in v.level)
    if v.margin is not None:
        assert v.margin > 1 + LEVEL
    assert v.speculation_pays == (min(times) * (1 + LEVEL) < ar)
    assert (v.why is None) == v.speculation_pays
    assert v.lines[0].startswith("verdict: fastest on this trace: ")


# ------------------------------------------------------------------------------ the real command


def ecosim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ecosim.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "COLUMNS": "200"}, timeout=600)


def _words(text: str) -> str:
    """Text with its line breaks and runs of spaces made one space (the console wraps long lines)."""
    return " ".join(text.split())


def test_replay_of_the_committed_traces_is_one_row_per_policy_and_ends_with_why_speculation_loses() -> None:
    r = ecosim("replay", "traces/", "--bw", "3.3TB/s")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    table = table_rows(out)
    assert len(table) == 10 and table[0][0] == "8 traces"  # one row per policy, the totals
    assert "--per-trace" in out and not any("eagle3-qa" in c for row in table for c in row)
    tail = out[out.index("verdict: "):]
    assert tail.startswith("verdict: fastest over 8 traces: ar (plain decoding)") and "ecospec-auto" in tail
    assert "why speculation loses: a plain step takes" in tail and "bookkeeping" in tail
    assert "ecosim synth dsv31-synthetic --model deepseek-v3.1" in tail.replace("\n", " ")

    r = ecosim("replay", "traces/", "--bw", "3.3TB/s", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    v, by = doc["verdict"], {t["policy"]: t for t in doc["totals"]}
    assert len(doc["rows"]) == 8 * len(doc["totals"])  # --json keeps every (trace, policy) row
    assert v["fastest"]["policy"] == "ar" and not v["speculation_pays"] and v["traces"] == 8
    best = min((t for t in doc["totals"] if t["policy"] not in ("ar", "oracle") and t["tokens_per_step"] > 1),
               key=lambda t: t["time_per_token_s"])
    assert v["best_speculative"]["label"] == best["label"]
    w = v["why"]
    assert w["plain_step_s"] == pytest.approx(by["ar"]["time_per_token_s"])
    assert w["draft_side_s"] == pytest.approx(w["draft_forwards_s"] + w["bookkeeping_s"])
    # the draft side is the policy's own, as priced: each step's own draft steps (cascade drafts fewer
    # than the setting's N, so it spends less than the setting's full draft)
    assert w["draft_side_s"] == pytest.approx(best["draft_s"] / best["steps"])
    assert w["draft_levels"] == pytest.approx(best["draft_levels"] / best["steps"])
    assert 0 < w["draft_side_s"] <= max(doc["used"]["draft_time_s"].values())
    assert w["step_s"] == pytest.approx(best["time_s"] / best["steps"]) and w["step_s"] > w["break_even_s"]
    assert w["break_even_s"] == pytest.approx(best["tokens_per_step"] * w["plain_step_s"])
    assert _words(out).endswith(_words("\n".join(v["lines"])))  # the table's output ends with the same lines


def test_replay_per_trace_prints_every_trace_then_the_same_verdict() -> None:
    r = ecosim("replay", "traces/qa", "traces/eagle3-qa", "--per-trace")
    assert r.returncode == 0, r.stderr
    first = [row[0] for row in table_rows(r.stdout)]
    assert [x for x in first if x] == ["qa", "eagle3-qa", "total"]  # in the order given
    assert "verdict: fastest over 2 traces" in r.stdout


def test_replay_of_a_synthetic_deepseek_trace_where_speculation_pays_names_a_speculative_policy(tmp_path: Path) -> None:
    t = tmp_path / "dsv31"
    r = ecosim("synth", str(t), "--model", "deepseek-v3.1", "--requests", "2", "--positions", "48", "--seed", "0")
    assert r.returncode == 0, r.stderr
    r = ecosim("replay", str(t), "--hardware", "h200", "--placement", "tp:8", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    v = doc["verdict"]
    assert v["speculation_pays"] and v["fastest"]["speculative"] and v["fastest"]["speedup_vs_ar"] > 1.2
    assert v["why"] is None and v["paper_scale"] is None
    (reading,) = v["readings"]
    by = {x["policy"]: x["time_per_token_s"] for x in doc["totals"]}
    assert reading["auto_over_ar"] == pytest.approx(by["ar"] / by["ecospec-auto"]) and reading["auto_over_ar"] > 1.2
    assert reading["eagle2_over_ar"] == pytest.approx(by["ar"] / by["eagle2-default"])
    assert reading["auto_over_eagle2"] == pytest.approx(by["eagle2-default"] / by["ecospec-auto"])
    fastest = min((x for x in doc["totals"] if x["policy"] != "oracle"), key=lambda x: x["time_per_token_s"])
    assert v["fastest"]["time_per_token_s"] == fastest["time_per_token_s"]
    assert v["lines"][0].startswith(f"verdict: fastest on this trace: {v['fastest']['label']}")
    assert v["lines"][1].startswith(f"speculation pays: {v['best_speculative']['label']} runs at ")
    r = ecosim("replay", str(t), "--hardware", "h200", "--placement", "tp:8")
    assert r.returncode == 0, r.stderr
    assert _words(r.stdout).endswith(_words("\n".join(v["lines"])))


def test_the_event_engine_reports_the_same_draft_side_as_the_fast_engine() -> None:
    """One request at a time, the event engine prices the same steps: its rows carry the same draft seconds
    and levels, so the verdict's reason is the same whichever engine ran."""
    fast, des = (json.loads(ecosim("replay", "traces/qa", "--json", *extra).stdout) for extra in ((), ("--engine", "des")))
    for a, b in zip(fast["totals"], des["totals"]):
        assert (a["policy"], a["draft_levels"]) == (b["policy"], b["draft_levels"])
        assert a["draft_s"] == pytest.approx(b["draft_s"])
    side = fast["verdict"]["why"]["draft_side_s"]
    assert side > 0 and des["verdict"]["why"]["draft_side_s"] == pytest.approx(side)
