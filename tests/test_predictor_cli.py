"""The `ecosim predictor` CLI: train, eval and replay end to end, training on a folder, bad input refused in one
line with exit 2, a predictor trained for another shape refused, and no torch imported by the predictors.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ecosim.errors import EcoSimError
from ecosim.predictors.train import train
from ecosim.synth import SynthConfig, write_synthetic
from ecosim.trace.io import read_trace
from predictor_traces import SHAPE, SMALL, _run, make_traces


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_traces(tmp_path_factory.mktemp("predictor-traces"))


def test_cli_train_eval_replay_end_to_end(traces: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "tok.npz"
    code, out, err = _run(["predictor", "train", str(traces["mixed"]), "--kind", "token", "--out", str(f),
                           "--holdout", "0.34", "--json"], capsys)
    assert code == 0, err
    trained = json.loads(out)
    record = trained["training"]["traces"][0]
    assert f.is_file() and trained["kind"] == "token"
    assert not set(record["train_requests"]) & set(record["heldout_requests"])

    code, out, err = _run(["predictor", "eval", str(f), str(traces["mixed"]), "--json"], capsys)
    assert code == 0, err
    ev = json.loads(out)
    row = ev["traces"][0]
    assert row["split"] == "held out" and row["requests"] == record["heldout_requests"]
    assert 0.0 < ev["total"]["recall"] <= 1.0 and len(row["per_layer"]["recall"]) == SHAPE.num_moe_layers
    assert row["us_per_candidate"] > 0 and "mae" in row["marginal"]
    assert "warning" not in err  # held-out requests only: nothing in-sample

    code, out, err = _run(["predictor", "eval", "oracle", str(traces["mixed"]), "--split-from", str(f), "--json"], capsys)
    assert code == 0 and json.loads(out)["traces"][0]["requests"] == record["heldout_requests"]

    code, out, err = _run(["predictor", "eval", "token", str(traces["mixed"]), "--split-from", str(f), "--json"], capsys)
    row = json.loads(out)["traces"][0]
    assert code == 0 and row["requests"] == record["heldout_requests"] and row["split"] == "held out, leave-requests-out"

    code, out, err = _run(["predictor", "eval", str(f), str(traces["mixed"]), "--all-requests", "--json"], capsys)
    assert code == 0 and "in-sample" in err

    code, out, err = _run(["predictor", "eval", str(f), str(traces["token"]), "--json"], capsys)  # never seen: all requests
    assert code == 0 and json.loads(out)["traces"][0]["split"] == "not in training"
    code, out, err = _run(["predictor", "eval", str(f), str(traces["token"]), str(traces["mixed"])], capsys)  # the table
    assert code == 0 and "recall" in out and "total" in out

    for predictor in (str(f), "token"):
        code, out, err = _run(["replay", str(traces["mixed"]), "--policy", "ecospec", "--predictor", predictor, "--json"], capsys)
        assert code == 0, err
        assert json.loads(out)["totals"][0]["tokens"] == SMALL["requests"] * SMALL["positions"]


def test_train_on_a_folder_then_eval_on_it_scores_every_held_out_request_and_names_the_skipped(
        tmp_path: Path) -> None:
    """The first thing anyone does, on the committed traces, as a user runs it: train on `traces/`,
    evaluate on `traces/`. Every request held out (of any trace) is scored; a trace the draw held out
    none of is skipped and named in one line; --unheld-in-sample scores it in-sample instead."""
    root = Path(__file__).resolve().parent.parent

    def ecosim(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "ecosim.cli", *args], capture_output=True, text=True, cwd=root, timeout=600)

    f = tmp_path / "P.npz"
    r = ecosim("predictor", "train", "traces/", "--kind", "token", "--out", str(f), "--json")
    assert r.returncode == 0, r.stderr
    record = {t["name"]: t for t in json.loads(r.stdout)["training"]["traces"]}
    held = {n: t["heldout_requests"] for n, t in record.items() if t["heldout_requests"]}
    none = sorted(set(record) - set(held))
    assert held and none  # seed 0 on the committed traces: eagle3-qa's four requests are all trained on

    r = ecosim("predictor", "eval", str(f), "traces/", "--json")
    assert r.returncode == 0, r.stderr
    ev = json.loads(r.stdout)
    assert {t["trace"]: t["requests"] for t in ev["traces"]} == held
    assert all(t["split"] == "held out" for t in ev["traces"])
    assert [s["trace"] for s in ev["skipped"]] == none
    assert ev["total"]["rows"] == sum(t["rows"] for t in ev["traces"]) and 0.0 < ev["total"]["recall"] < 1.0
    (line,) = [x for x in r.stderr.splitlines() if "skipped" in x]
    assert all(n in line for n in none) and "warning" not in r.stderr  # nothing scored in-sample

    r = ecosim("predictor", "eval", str(f), "traces/")  # the table says the same in its last line
    assert r.returncode == 0, r.stderr
    assert "total" in r.stdout and f"skipped {len(none)} trace(s)" in r.stdout.replace("\n", " ")

    r = ecosim("predictor", "eval", str(f), *(f"traces/{n}" for n in none), "--unheld-in-sample", "--json")
    assert r.returncode == 0, r.stderr
    ev = json.loads(r.stdout)
    assert [t["trace"] for t in ev["traces"]] == none and not ev["skipped"]
    assert all("in-sample" in t["split"] for t in ev["traces"]) and "in-sample" in r.stderr

    r = ecosim("predictor", "eval", str(f), *(f"traces/{n}" for n in none))  # nothing left to score: say so, exit 2
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--unheld-in-sample" in r.stderr


@pytest.mark.parametrize("argv,message", [
    (["predictor", "eval", "{tmp}/missing.npz", "{trace}"], "unknown predictor"),
    (["predictor", "eval", "{tmp}/junk.npz", "{trace}"], "not a predictor file"),
    (["predictor", "train", "{trace}", "--kind", "bogus", "--out", "{tmp}/x.npz"], "unknown predictor kind"),
    (["predictor", "train", "{tmp}/nowhere", "--kind", "token", "--out", "{tmp}/x.npz"], "no such file"),
    (["predictor", "train", "{trace}", "--kind", "token", "--out", "{tmp}/x.npz", "--holdout", "1.5"], "holdout"),
    (["replay", "{trace}", "--policy", "ecospec", "--predictor", "{tmp}/missing.npz"], "unknown predictor"),
])
def test_cli_bad_input_is_one_line_and_exit_2(traces: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               argv: list[str], message: str) -> None:
    (tmp_path / "junk.npz").write_text("not a zip")
    code, out, err = _run([a.format(tmp=tmp_path, trace=traces["mixed"]) for a in argv], capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and message in err


def test_predictor_for_another_shape_is_refused(traces: dict[str, Path], tmp_path: Path) -> None:
    pred, record = train([read_trace(traces["mixed"])], "freq", 0.34, 0)
    other = read_trace(write_synthetic(tmp_path / "other", replace(SHAPE, num_experts=8), SynthConfig(**SMALL)))
    with pytest.raises(EcoSimError, match="trained for"):
        pred.predict(other)


def test_ecosim_predictors_do_not_import_torch() -> None:
    code = "import sys, ecosim.predictors, ecosim.predictors.context, ecosim.analysis.predictor_compare, ecosim.cli.predictor; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
