"""The `validate` command end to end on a tiny pair (calibrate + run + report), and its inputs."""

from __future__ import annotations

import json

import polars as pl
import pytest

from ecosim.catalog.devices import get_device
from ecosim.errors import EcoSimError
from validate.choice import from_flags, read_winner
from validate.cli import main
from vhelpers import TREE

TREE_FLAGS = ["--depth", str(TREE["depth"]), "--topk", str(TREE["topk"]), "--max-nodes", str(TREE["max_nodes"])]


def winner_doc(config, hardware="h200", placement="hbm"):
    """The shape of `ecosim sweep`'s winner.json (ecosim/sweep/winner.py), one entry."""
    return {"schema": "ecosim-winner", "version": 1, "objective": "time_per_token", "constraints": {"min_tokens_per_step": None},
            "traces": [], "versions": {}, "cost": {},
            "winners": [{"hardware": hardware, "hbm_bw": 4.8e12, "placement": placement, "device": {}, "candidates": 3,
                         "config": config, "predicted": {"time_per_token_s": 1e-3} if config else None, "per_trace": []}]}


def test_winner_file_forms(tmp_path):
    cfg = {"policy": "ecospec", "budget": 8, "lambda": 0.25, "predictor": "token", "score": "ratio", "config_ids": ["x"]}
    p = tmp_path / "w.json"
    p.write_text(json.dumps(winner_doc(cfg)))
    c = read_winner(p)
    assert (c.winner.name, c.winner.budget, c.winner.lam, c.winner.predictor, c.winner.score) == ("ecospec", 8, 0.25, "token", "ratio")
    assert [s.label() for s in c.policies] == [c.winner.label(), "ar", "confidence b=8"]
    assert c.placement == "hbm" and c.predicted == {"time_per_token_s": 1e-3}
    p.write_text(json.dumps({"policy": "confidence", "budget": 5}))  # a bare configuration
    assert [s.label() for s in read_winner(p).policies] == ["confidence b=5", "ar"]
    p.write_text(json.dumps({"config": {"policy": "ar"}}))
    assert [s.label() for s in read_winner(p).policies] == ["ar", "confidence b=16"]
    two = winner_doc(cfg)
    two["winners"].append({**two["winners"][0], "placement": "ep:8"})
    p.write_text(json.dumps(two))
    assert read_winner(p).placement == "hbm"  # the one a single device runs
    assert read_winner(p, entry=1).placement == "ep:8"
    assert [s.label() for s in from_flags("ecospec", {}).policies][0] == "ecospec b=16 λ=0.5 token"  # the one default predictor


@pytest.mark.parametrize("doc, message", [
    ({"policy": "ecospec", "budget": 8, "predictor": "oracle"}, "missing 'lambda'"),
    ({"policy": "oracle"}, "cannot be run"),
    ({"policy": "confidence", "budget": 2.5}, "budget must be"),
    (winner_doc(None), "no entries with a configuration"),
    ([1, 2], "expected a JSON object"),
])
def test_winner_file_errors(tmp_path, doc, message):
    p = tmp_path / "w.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(EcoSimError, match=message):
        read_winner(p)


def test_bad_input_is_one_line_exit_2(tmp_path, capsys):
    p = tmp_path / "w.json"
    p.write_text("{not json")
    assert main(["run", "--model", "x", "--out", str(tmp_path / "r"), "--winner", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("validate: error: --winner") and "\n" not in err
    assert main(["run", "--model", "x", "--out", str(tmp_path / "r"), "--winner", str(p), "--policy", "ar"]) == 2
    assert main(["calibrate", "--model", "x", "--out", str(tmp_path / "p.json"), "--tokens", "1,a"]) == 2
    assert main(["report", str(tmp_path / "nope")]) == 2
    capsys.readouterr()
    run = ["run", "--out", str(tmp_path / "r"), "--policy", "ar", "--prompts", str(p)]
    for args, message in [
        (["--model", str(tmp_path / "nonexistent")], "no such directory"),
        (["--model", "x", "--device", "tpu"], "--device tpu: expected cpu, cuda or cuda:N"),
        (["--model", "x", "--device", "auto"], "--device auto: expected cpu, cuda or cuda:N"),
        (["--model", "x", "--prompts", str(tmp_path / "none.jsonl")], "no such file or directory"),
    ]:
        assert main([*run, *args]) == 2, args
        err = capsys.readouterr().err.strip()
        assert err.startswith("validate: error: ") and message in err and "\n" not in err, err
    assert not (tmp_path / "r").exists()  # bad input fails before anything is written
    assert main(["calibrate", "--model", "x", "--out", str(tmp_path / "p.json"), "--device", "cuda:x"]) == 2


def test_calibrate_run_report(tmp_path, tiny_pair_dir, prompts_path, capsys):
    """calibrate, then run with a winner file (calibrating on the spot), then report (re-priced)."""
    prof = tmp_path / "profile.json"
    assert main(["calibrate", "--model", str(tiny_pair_dir), "--out", str(prof), "--tokens", "1,4,12", "--levels", "2",
                 "--prompts", str(prompts_path),
                 "--contexts", "24", "--repeats", "2", *TREE_FLAGS]) == 0
    out = capsys.readouterr()
    assert "bandwidth" in out.out
    # progress on stderr (not a terminal here: a line at every tenth of the runs, the last one at the end)
    lines = [x for x in out.err.splitlines() if x.startswith("validate: calibrating")]
    assert lines[0].startswith("validate: calibrating: ") and "timed runs (" in lines[0]
    total = int(lines[0].split()[2])
    assert lines[-1].startswith(f"validate: calibrating: {total}/{total} runs") and len(lines) <= 12
    dev = get_device(str(prof))
    assert dev.overlap == "sum" and dev.bw_efficiency == 1.0 and dev.draft_time_s > 0 and dev.hbm_bw > 0

    w = tmp_path / "winner.json"
    w.write_text(json.dumps(winner_doc({"policy": "ecospec", "budget": 4, "lambda": 0.5, "predictor": "oracle",
                                        "score": "difference", "config_ids": []})))
    run = tmp_path / "run"
    code = main(["run", "--model", str(tiny_pair_dir), "--draft", str(tiny_pair_dir / "target"), "--prompts", str(prompts_path),
                 "--max-prompts", "2", "--winner", str(w), "--out", str(run), "--max-new-tokens", "10", "--repeats", "2",
                 "--calib-tokens", "1,4", "--calib-repeats", "1", "--quiet", "--no-fail", *TREE_FLAGS])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "lossless: yes" in out.out
    for f in ("trace/manifest.json", "profile.json", "measured.json", "steps.parquet", "comparison.json", "comparison.parquet"):
        assert (run / f).is_file(), f
    doc = json.loads((run / "comparison.json").read_text())
    assert doc["lossless"] is True and isinstance(doc["ranking_preserved"], bool)
    for key in ("mae_pct", "worst_pct", "device", "model", "steps", "policies", "winner_margin"):
        assert key in doc
    assert [p["label"] for p in doc["policies"]] == ["ecospec b=4 λ=0.5 oracle", "ar", "confidence b=4"]
    for p in doc["policies"]:
        for key in ("policy", "label", "measured_time_per_token_s", "simulated_time_per_token_s", "error_pct", "tokens",
                    "steps", "experts_per_step"):
            assert key in p
        assert p["tokens"] == 20 and p["measured_time_per_token_s"] > 0 and p["simulated_time_per_token_s"] > 0
        assert p["steps"] == p["simulated_steps"] and p["experts_per_step"] == pytest.approx(p["simulated_experts_per_step"])
    assert {"policy", "experts", "tokens", "measured_s", "simulated_s"} <= set(doc["steps"][0])
    assert sum(s["tokens"] for s in doc["steps"]) == 60
    assert pl.read_parquet(run / "comparison.parquet").height == 3

    # report: re-priced with the profile from `validate calibrate`
    assert main(["report", str(run), "--hardware", str(prof), "--no-fail"]) == 0
    assert "lossless: yes" in capsys.readouterr().out
    assert json.loads((run / "comparison.json").read_text())["hardware"]["profile"] == str(prof)

    # ecosim itself reads the profile and the trace recorded on the spot
    from ecosim.cli import main as ecosim_main

    assert ecosim_main(["replay", str(run / "trace"), "--hardware", str(prof), "--json"]) == 0
    capsys.readouterr()

    # a run that was not lossless fails with one line naming the first diverging position
    m = json.loads((run / "measured.json").read_text())
    m["lossless"] = False
    m["lossless_failures"] = [{"policy": "ar", "request": 1, "repeat": 0, "position": 3, "expected": 7, "got": 9}]
    (run / "measured.json").write_text(json.dumps(m))
    assert main(["report", str(run)]) == 1
    out = capsys.readouterr()
    assert "validate: error: not lossless: ar request 1 (repeat 0) diverges from greedy decoding at position 3" in out.err
    assert "lossless: NO" in out.out
