"""Legal but useless input: one warning line and a correct result, from replay and, for a sweep's axes, from
sweep (a knob no chosen policy reads, budgets above every tree, uneven expert-parallel groups); what is useful
says nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gate_cases import base_trace, run


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return base_trace(tmp_path_factory.mktemp("gate"))


def warned(capsys, args: list, *needles: str) -> str:
    code, out, err = run(capsys, *args)
    warnings = [line for line in err.splitlines() if line.startswith("ecosim: warning: ")]
    assert code == 0 and len(warnings) == 1, (code, err)
    for n in needles:
        assert n.lower() in warnings[0].lower(), (n, warnings[0])
    return out


def test_legal_but_useless_values_are_one_warning(capsys, base):
    out = warned(capsys, ["replay", base, "--lambda", "auto", "--policy", "confidence"], "--lambda auto", "no effect")
    assert "confidence" in out
    warned(capsys, ["replay", base, "--budget", "100", "--policy", "confidence"], "above every tree", "--budget 12")
    warned(capsys, ["replay", base, "--placement", "ep:3", "--policy", "ar"], "unevenly", "N dividing 8")
    code, _, err = run(capsys, "replay", base, "--policy", "confidence", "--budget", "4", "--placement", "ep:4")
    assert code == 0 and "warning" not in err  # what is useful says nothing


def test_a_sweep_warns_of_an_axis_no_policy_reads_and_of_budgets_above_every_tree(capsys, base, tmp_path):
    """The same warnings as replay's, for a sweep's axes: one line each, the sweep still runs."""
    warned(capsys, ["sweep", base, "--policy", "confidence", "--lambda", "auto", "--out", tmp_path / "a"],
           "--lambda auto", "no effect", "not an axis")
    warned(capsys, ["sweep", base, "--policy", "confidence", "--budget", "4,100", "--out", tmp_path / "b"],
           "--budget 100 above every tree", "--budget 12")
    code, _, err = run(capsys, "sweep", base, "--policy", "confidence,ecospec", "--lambda", "0.5,auto", "--budget", "4:8:4",
                       "--out", tmp_path / "c")
    assert code == 0 and "warning" not in err  # every axis is read by a swept policy, every budget within the trees
