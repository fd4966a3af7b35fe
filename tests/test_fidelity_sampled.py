"""Published rows measured while sampling (temperature > 0): the field, its check, and how `ecosim fidelity` shows them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from ecosim.errors import EcoSimError
from ecosim.fidelity import Result, load_rows
from ecosim.fidelity_sampled import sampled_line, sampled_summary, temperature

ROWS = load_rows()


def ecosim(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ecosim.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ), timeout=900)


def test_the_table_holds_sampled_moe_rows_each_saying_its_temperature_in_its_source():
    hot = [r for r in ROWS if temperature(r) > 0]
    assert {r["id"] for r in hot} >= {"specdrift-gptoss120b-h100-eagle3-bs1", "specdrift-gptoss20b-h100-eagle3-bs1",
                                      "aimosprite-gptoss120b-h100-vllm-eagle3-chain4-bs8"}
    for r in hot:  # the temperature is the source's, read in the row's own notes
        assert f"temperature {temperature(r):g}" in r["notes"] or f"temperature={temperature(r):.1f}" in r["notes"], r["id"]
        assert r["url"].startswith("https://") and r["quote"] and r["model"].startswith("gpt-oss")
    assert {temperature(r) for r in hot} == {0.7, 1.0}
    assert any(r["sim"] and r["metric"] == "spec_speedup" for r in hot)  # at least one predicted speculative row
    assert all(temperature(r) == 0 for r in ROWS if "temperature" not in r)  # absent: greedy


@pytest.mark.parametrize("bad", [-0.1, "hot", True, 1000])
def test_a_temperature_that_is_not_a_number_in_range_is_refused(tmp_path, bad):
    row = {**next(r for r in ROWS if r["id"] == "specdrift-gptoss20b-h100-plain-bs1"), "temperature": bad}
    table = tmp_path / "t.json"
    table.write_text(json.dumps({"rows": [row]}))
    with pytest.raises(EcoSimError, match=r"row 'specdrift-gptoss20b-h100-plain-bs1': temperature must be a number"):
        load_rows(table)


def test_the_sampled_rows_are_summarised_apart_by_hand():
    base = next(r for r in ROWS if r["id"] == "specdrift-gptoss20b-h100-plain-bs1")
    results = [Result({**base, "id": "a", "temperature": 0.7}, 1.0, 0.10, None, None),
               Result({**base, "id": "b", "temperature": 1.0}, 1.0, -0.30, None, None),
               Result({**base, "id": "c", "temperature": 0.0}, 1.0, 0.90, None, None),  # greedy: not counted
               Result({**base, "id": "d", "temperature": 0.7, "separate": "unoptimised"}, 1.0, 0.5, None, None)]
    s = sampled_summary(results)
    assert (s["rows"], s["temperatures"]) == (2, [0.7, 1.0])
    assert s["median_abs_error"] == pytest.approx(0.20) and s["worst_abs_error"] == pytest.approx(0.30)
    line = sampled_line(s, [{"id": "e", "temperature": 1.0}, {"id": "f"}])
    assert line == ("sampled (T > 0): 2 rows at T = 0.7, 1, median |error| 20.0%, worst 30.0% (a +10.0%, b -30.0%); "
                    "1 not predicted (e at T = 1)")
    assert sampled_line(sampled_summary(results[2:3]), []) is None


def test_the_cli_shows_each_rows_temperature_and_the_sampled_summary(tmp_path):
    rows = [r for r in ROWS if r["id"] in ("specdrift-gptoss20b-h100-plain-bs1", "baseten-mixtral-a100-int8-bs1",
                                            "aimosprite-gptoss120b-h100-vllm-eagle3-chain4-bs8")]
    table = tmp_path / "t.json"
    table.write_text(json.dumps({"rows": rows}))
    r = ecosim("fidelity", "--table", str(table), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert {x["id"]: x["temperature"] for x in doc["rows"]} == {"specdrift-gptoss20b-h100-plain-bs1": 0.7,
                                                                 "baseten-mixtral-a100-int8-bs1": 0.0}
    assert doc["not_predicted"][0]["temperature"] == 1.0 and doc["summary"]["sampled"]["rows"] == 1
    md = ecosim("fidelity", "--table", str(table), "--markdown").stdout
    assert "[specdrift-gptoss20b-h100-plain-bs1](https://hugingapi.com/Dogacel/specdrift-gpt-oss-20b-eagle3) (fit) (T=0.7) |" in md
    assert "sampled (T > 0): 1 rows at T = 0.7, median |error| " in md
    assert "1 not predicted (aimosprite-gptoss120b-h100-vllm-eagle3-chain4-bs8 at T = 1)" in md
