"""Engine-release serving profiles: each published row names its release, each release profile is the fit on its
own release's plain rows (and says so), and the fit does what fidelity/releases.py's docstring says."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from ecosim.catalog.serving import load_serving, shipped, shipped_help
from ecosim.errors import EcoSimError
from ecosim.fidelity import PLAIN, load_rows
from ecosim.fidelity.releases import FITTED, K_GRID, MIN_ROWS, _solve, fit_release, release_of

ROWS = load_rows()
RELEASES = ("sglang-0.4", "sglang-0.5", "trtllm", "vllm-v1")


def expected_release(r: dict) -> str | None:
    """The rule published.json's `about` states: version first, the date where the source gives none."""
    e, v, date = r["engine"], str(r["version"] or ""), str(r["date"])
    if e in ("ktransformers", "llama.cpp", "ik_llama.cpp"):
        return e
    if e.startswith("vllm"):
        return "vllm-v1"
    if e == "trt-llm":
        return "trtllm"
    m = re.search(r"\b0\.(4|5)\.", v)
    if m:
        return f"sglang-0.{m.group(1)}"
    ym = re.match(r"(\d{4})(?:-(\d{2}))?", date)
    assert ym, r["id"]
    y, mo = int(ym.group(1)), ym.group(2)
    if mo is None:  # a year alone: 2026 is after 0.5's release, 2025 could be either
        return "sglang-0.5" if y >= 2026 else None
    return "sglang-0.4" if (y, int(mo)) < (2025, 8) else "sglang-0.5"


def test_every_row_names_the_release_its_engine_and_version_or_date_select():
    for r in ROWS:
        assert r.get("release") == expected_release(r), r["id"]
        if (r["sim"] or {}).get("profile"):
            assert release_of(r) == r["sim"]["profile"] == r["release"]


@pytest.mark.parametrize("bad", ["sglang-9", "cuda-graphs-typo"])
def test_a_row_naming_no_shipped_profile_is_refused(tmp_path, bad):
    row = next(r for r in ROWS if r["sim"] and not r["fit"])
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"rows": [{**row, "release": bad}]}))
    with pytest.raises(EcoSimError, match="release must name a shipped serving profile"):
        load_rows(path)


def test_the_fit_recovers_a_known_step_and_efficiency_factor():
    """Rows made from the model itself at k = 0.6 and s = 1 ms are fitted back exactly (grid points); with two rows,
    under MIN_ROWS, only k is fitted and s stays where it was given."""
    rng = np.random.default_rng(0)
    r = rng.uniform(1e-3, 5e-3, size=(4, 1)) / K_GRID[None, :]  # memory-bound: time scales as 1 / k
    f = np.ones(4)
    j = int(np.argmin(np.abs(K_GRID - 0.6)))
    from ecosim.fidelity.releases import S_GRID
    s = S_GRID[int(np.argmin(np.abs(S_GRID - 1e-3)))]
    y = r[:, j] + s
    assert _solve(r, f, y, 0.0) == pytest.approx((K_GRID[j], s))
    assert MIN_ROWS == 3 and _solve(r[:2], f[:2], r[:2, j] + 2e-3, 2e-3) == pytest.approx((K_GRID[j], 2e-3))


@pytest.mark.parametrize("name", RELEASES)
def test_each_shipped_release_profile_is_its_fit_on_its_own_plain_rows(name):
    rows = [r for r in ROWS if r["sim"] and r.get("release") == name and not r["sim"].get("profile")]
    fit = fit_release(name, rows)
    prof = load_serving(name)
    plain = [r["id"] for r in rows if r["metric"] in PLAIN and not r.get("separate")]
    assert list(prof.fitted_on) == fit.fitted_on == plain and len(plain) >= 2
    assert {k: getattr(prof, k) for k in FITTED} == pytest.approx(fit.terms, rel=1e-9, abs=1e-12)
    assert all(x.loo_error is not None for x in fit.plain)  # every plain row is also predicted held out
    for k in FITTED:
        assert "fitted by `ecosim fidelity --write-releases" in dict(prof.sources)[k]
    base = load_serving("cuda-graphs")  # everything else is the base's
    assert prof.kernel_latency_s == base.kernel_latency_s and prof.spec_sync_s == base.spec_sync_s


def test_profile_help_lists_every_shipped_profile_with_the_rows_it_was_fitted_on():
    text = shipped_help()
    for name in shipped():
        assert name in text
    assert "sglang-0.5 (fitted on 15 published rows: lmsys x4" in text and "sglcookbook x7" in text


def test_cli_reports_each_release_fitted_and_held_out_and_writes_its_profile(tmp_path):
    """On a table of vLLM's three plain rows: --json's `profiles` carries vllm-v1's fitted and leave-one-out
    medians beside the same rows under cuda-graphs, --markdown prints the per-profile table, and --write-releases
    writes the profile the shipped one is (refusing a folder that exists)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    ROOT = Path(__file__).resolve().parents[1]

    def ecosim(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "ecosim.cli", *args], capture_output=True, text=True, cwd=ROOT,
                              env=dict(os.environ), timeout=600)

    rows = [r for r in ROWS if r.get("release") == "vllm-v1" and r["sim"]]
    table = tmp_path / "t.json"
    table.write_text(json.dumps({"rows": rows}))
    out = tmp_path / "rel"
    r = ecosim("fidelity", "--table", str(table), "--json", "--write-releases", str(out))
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)["profiles"]["vllm-v1"]
    assert p["plain_fitted"]["rows"] == p["plain_held_out"]["rows"] == p["plain_under_cuda_graphs"]["rows"] == 3
    assert p["held_out_by"] == "leave-one-out within the release" and p["fitted_on"] == [x["id"] for x in rows]
    assert p["plain_held_out"]["median_abs_error"] >= p["plain_fitted"]["median_abs_error"]
    written = json.loads((out / "vllm-v1.json").read_text())
    assert written["fitted_on"] == list(load_serving("vllm-v1").fitted_on)
    assert written["bw_efficiency"] == pytest.approx(load_serving("vllm-v1").bw_efficiency)
    again = ecosim("fidelity", "--table", str(table), "--write-releases", str(out))
    assert again.returncode == 2 and "exists" in again.stderr
    md = ecosim("fidelity", "--table", str(table), "--markdown").stdout
    assert "| profile | plain rows | plain median, fitted | plain median, held out (how) |" in md
    assert any(line.startswith("| vllm-v1 | 3 |") for line in md.splitlines())
