"""The fidelity notebook: built on the committed real run, and on a `validate report --out` folder."""

from __future__ import annotations

import base64
import json
import re

import pytest

from conftest import ROOT

pytest.importorskip("papermill")

from ecosim.report import ReportConfig, build  # noqa: E402

FIXTURE = ROOT / "tests" / "validate" / "data" / "ecosim-tiny-x256-cpu"


def _figures(page) -> list[bytes]:
    html = page.read_text()
    assert "Traceback (most recent call last)" not in html
    images = [base64.b64decode(i) for i in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)]
    return [i for i in images if i[:8] == b"\x89PNG\r\n\x1a\n" and len(i) > 2000]  # nbconvert's own tiny icons aside


@pytest.mark.slow
def test_fidelity_on_the_committed_run(tmp_path):
    before = sorted(p.name for p in FIXTURE.iterdir())
    want = json.loads((FIXTURE / "expected.json").read_text())  # pins the committed run's comparison
    (page,) = build(ReportConfig(traces=ROOT / "traces", reports=ROOT / "reports", out=tmp_path, only=("fidelity",)))
    assert len(_figures(page)) == 2
    assert sorted(p.name for p in (tmp_path / "fidelity").glob("*.png")) == ["step_times.png", "time_per_token.png"]
    html = page.read_text()
    assert "REAL measurement" in html and f"mean absolute error {want['mae_pct']:.2f}%" in html
    doc = json.loads((tmp_path / "fidelity" / "comparison.json").read_text())  # compared by the notebook itself
    assert doc["mae_pct"] == pytest.approx(want["mae_pct"], rel=1e-9)
    assert sorted(p.name for p in FIXTURE.iterdir()) == before  # nothing written into the fixture


@pytest.mark.slow
def test_fidelity_reads_a_validate_report_folder(tmp_path):
    from validate.compare import compare_run

    folder = tmp_path / "validation"
    doc = compare_run(FIXTURE, out=folder)  # what `validate report RUN --out folder` writes
    doc["mae_pct"] = 1.234567  # marks that the notebook read this file rather than recomputing
    (folder / "comparison.json").write_text(json.dumps(doc))
    (page,) = build(ReportConfig(traces=ROOT / "traces", reports=ROOT / "reports", out=tmp_path / "build", validation=folder, only=("fidelity",)))
    assert len(_figures(page)) == 2
    assert "mean absolute error 1.23%" in page.read_text()
