"""`ecosim winner` and `ecosim pareto` on a finished sweep: the winner is the argmin (or argmax) of its objective
under its constraint, checked against totals computed independently with polars; the Pareto front is
non-dominated and complete; both refuse the results of an unfinished sweep.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from ecosim.sweep.winner import check_winner
from sweep_runs import _frame, cli, swept, traces  # noqa: F401 (the fixtures)


def _totals(df: pl.DataFrame) -> pl.DataFrame:
    """Independent of winner.py: totals per (pricing, configuration) with polars."""
    pricing, knobs = ["hardware", "hbm_bw", "placement"], ["policy", "budget", "lambda", "predictor", "score"]
    t = df.group_by(pricing + knobs, maintain_order=True).agg(pl.col("time_s").sum(), pl.col("tokens").sum(),
                                                              pl.col("steps").sum())
    ar = t.filter(pl.col("policy") == "ar").select(*pricing, (pl.col("time_s") / pl.col("tokens")).alias("ar_tpt"))
    return t.join(ar, on=pricing, maintain_order="left").with_columns(
        tpt=pl.col("time_s") / pl.col("tokens"), tps=pl.col("tokens") / pl.col("steps")
    ).with_columns(speedup=pl.col("ar_tpt") / pl.col("tpt"))


@pytest.mark.parametrize("objective, constraint", [("time_per_token", None), ("speedup_vs_ar", None),
                                                   ("time_per_token", 1.6)])
def test_winner_is_the_argmin_of_the_objective(swept, capsys, objective, constraint):
    args = ["winner", str(swept), "--objective", objective, "--json"]
    if constraint:
        args += ["--min-tokens-per-step", str(constraint)]
    code, out, err = cli(capsys, *args)
    assert code == 0, err
    doc = check_winner(json.loads((swept / "winner.json").read_text()))
    assert doc == json.loads(out)
    assert doc["objective"] == objective and doc["constraints"]["min_tokens_per_step"] == constraint
    assert [t["name"] for t in doc["traces"]] == ["a", "b"] and all(len(t["fingerprint"]) == 32 for t in doc["traces"])
    assert set(doc["versions"]) == {"ecosim", "numpy", "python"}
    assert len(doc["winners"]) == 6
    t = _totals(_frame(swept)).filter(pl.col("policy") != "oracle")
    if constraint:
        t = t.filter(pl.col("tps") >= constraint)
    for w in doc["winners"]:
        cands = t.filter(pl.col("hbm_bw") == w["hbm_bw"], pl.col("placement") == w["placement"])
        assert w["candidates"] == cands.height
        if cands.height == 0:
            assert w["config"] is None
            continue
        col = "tpt" if objective == "time_per_token" else "speedup"
        best = cands[col].min() if objective == "time_per_token" else cands[col].max()
        assert w["predicted"]["time_per_token_s" if col == "tpt" else "speedup_vs_ar"] == pytest.approx(best, rel=1e-12)
        mine = cands.filter(*[pl.col(k).eq_missing(w["config"][k]) for k in ("policy", "budget", "lambda", "predictor", "score")])
        assert mine.height == 1 and mine[col][0] == pytest.approx(best, rel=1e-12)
        if constraint:
            assert w["predicted"]["tokens_per_step"] >= constraint
        assert {p["fingerprint"] for p in w["per_trace"]} == {t["fingerprint"] for t in doc["traces"]}
    cli(capsys, "winner", str(swept))  # leave the default winner.json behind for the other tests


def test_pareto_front_is_non_dominated_and_complete(swept, capsys):
    code, out, err = cli(capsys, "pareto", str(swept), "--json")
    assert code == 0, err
    front = json.loads(out)["front"]
    assert front and all(r["policy"] != "oracle" for r in front)
    df = _frame(swept).filter(pl.col("policy") != "oracle")
    pts = df.group_by(["hbm_bw", "placement", "policy", "budget", "lambda"], maintain_order=True).agg(
        (pl.col("time_s").sum() / pl.col("tokens").sum()).alias("tpt"),
        (pl.col("expert_loads").sum() / pl.col("steps").sum()).alias("eps"))
    for (bw, pl_), grp in pts.group_by(["hbm_bw", "placement"], maintain_order=True):
        mine = [(r["time_per_token_s"], r["experts_per_step"]) for r in front if r["hbm_bw"] == bw and r["placement"] == pl_]
        allp = list(zip(grp["tpt"].to_list(), grp["eps"].to_list()))
        want = {p for p in allp if not any(q[0] <= p[0] and q[1] <= p[1] and q != p for q in allp)}
        assert set(mine) == want and len(mine) == len(want)
    code, out, err = cli(capsys, "pareto", str(swept))
    assert code == 0 and "Pareto front" in out


def test_winner_and_pareto_refuse_results_of_another_sweep(swept, tmp_path, capsys):
    import shutil

    d = tmp_path / "copy"
    shutil.copytree(swept, d)
    meta = json.loads((d / "sweep.json").read_text())
    meta["configurations"] += 1  # as if a bigger sweep had started here and not finished
    (d / "sweep.json").write_text(json.dumps(meta))
    for cmd in ("pareto", "winner"):
        code, _, err = cli(capsys, cmd, str(d))
        assert code == 2 and len(err.strip().splitlines()) == 1 and "unfinished sweep" in err
