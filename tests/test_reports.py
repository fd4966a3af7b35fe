"""CI executes every report notebook; each HTML page must carry its figures."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from conftest import ROOT

pytest.importorskip("papermill")

from ecosim.errors import EcoSimError  # noqa: E402
from ecosim.report import ORDER, ReportConfig, build, notebooks  # noqa: E402



def test_every_notebook_is_known_and_in_order():
    names = [p.stem for p in notebooks(ROOT / "reports")]
    assert names == [n for n in ORDER if n in names]
    assert {"expert_scattering", "cost_vs_experts", "lambda_sweep", "pareto", "reproduction"} <= set(names)


@pytest.mark.slow
def test_build_all_notebooks_on_the_committed_traces(tmp_path):
    build_dir = tmp_path / "_build"  # never into the checkout (`ecosim report` builds reports/_build for a person)
    pages = build(ReportConfig(traces=ROOT / "traces", reports=ROOT / "reports", out=build_dir))
    assert [p.stem for p in pages] == [p.stem for p in notebooks(ROOT / "reports")]
    for page in pages:
        html = page.read_text()
        images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
        assert images, f"{page.name} has no figure"
        assert all(base64.b64decode(i)[:8] == b"\x89PNG\r\n\x1a\n" for i in images)
        assert list((build_dir / page.stem).glob("*.png")), f"{page.stem}: no PNG saved"
        assert "Traceback (most recent call last)" not in html


@pytest.mark.slow
def test_a_clean_build_prints_one_line_per_notebook_and_nothing_alarming(tmp_path):
    """No kernel log (TCP-encryption warning, "KeyboardInterrupt caught in kernel") on a clean build."""
    import subprocess
    import sys

    out = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "ecosim.cli", "report", "--only", "expert_scattering", "--out", str(out)],
                       capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    lines = r.stdout.splitlines()
    if ReportConfig(reports=ROOT / "reports").routing_dir() is None:  # a clean clone: no ../shared beside it
        assert lines[0].startswith("routing: none at ") and lines[0].endswith("(give --routing DIR)")
        lines = lines[1:]
    assert lines == [f"built {out.resolve() / 'expert_scattering.html'}", f"1 reports in {out}"]


def test_routing_defaults_beside_the_repository_and_a_given_one_must_exist(tmp_path):
    repo = tmp_path / "repo"
    (repo / "reports").mkdir(parents=True)
    cfg = ReportConfig(reports=repo / "reports")
    assert cfg.routing_dir() is None  # absent: the reports run without it
    shared = tmp_path / "shared" / "data" / "gpt-oss-20b-routing"
    shared.mkdir(parents=True)
    assert cfg.routing_dir() == shared
    with pytest.raises(EcoSimError, match="no such routing directory"):
        ReportConfig(routing=tmp_path / "elsewhere").routing_dir()
