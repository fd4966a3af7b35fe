"""`ecosim tune` prints SGLang flags that paste into a launch command (the algorithm of the traces'
draft kind, the draft's path, the tree), and `tune`, `sweep` and `replay` draw `--plot FILE`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import ROOT, tiny_trace
from ecosim.catalog.drafts import DRAFT_PATH, sglang_draft_flags
from ecosim.cli import main
from ecosim.trace.io import write_trace

PNG = b"\x89PNG\r\n\x1a\n"


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _pairs(flags: str) -> dict[str, str]:
    words = flags.split()
    assert len(words) % 2 == 0 and all(w.startswith("--") for w in words[::2]), flags
    return dict(zip(words[::2], words[1::2]))


def test_each_draft_kind_names_sglangs_algorithm_and_its_draft():
    assert sglang_draft_flags({"kind": "eagle3"}, "models/x/eagle3") == \
        "--speculative-algorithm EAGLE3 --speculative-draft-model-path models/x/eagle3"
    assert sglang_draft_flags({"kind": "mtp"}, "deepseek-ai/DeepSeek-V3") == "--speculative-algorithm NEXTN"  # from the target
    assert sglang_draft_flags({"kind": "model"}, "my draft") == "--speculative-algorithm STANDALONE --speculative-draft-model-path 'my draft'"
    assert sglang_draft_flags({"kind": "eagle3"}, None).endswith(f"--speculative-draft-model-path {DRAFT_PATH}")
    assert sglang_draft_flags({"bytes": 0}, None).startswith("--speculative-algorithm EAGLE3")  # synthetic: an EAGLE-3 head
    assert sglang_draft_flags({"kind": "early-exit"}, "x") is None  # SGLang has none


@pytest.mark.parametrize("trace, algorithm, path", [
    ("eagle3-qa", "EAGLE3", "models/ecosim-tiny/eagle3"),
    ("qa", "STANDALONE", "models/ecosim-tiny/draft"),
])
def test_tune_prints_a_complete_set_of_sglang_flags_for_the_recorded_draft(capsys, trace, algorithm, path):
    code, out, err = _run(capsys, "tune", str(ROOT / "traces" / trace), "--top", "1", "--json")
    assert code == 0, err
    static = json.loads(out)["static"]
    flags = _pairs(static["sglang_flags"])
    assert flags["--speculative-algorithm"] == algorithm and flags["--speculative-draft-model-path"] == path
    assert {"--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens"} <= set(flags)
    assert static["sglang_draft_flags"] == f"--speculative-algorithm {algorithm} --speculative-draft-model-path {path}"


def test_tune_over_mixed_draft_kinds_says_why_the_algorithm_is_missing(capsys):
    code, out, err = _run(capsys, "tune", str(ROOT / "traces" / "qa"), str(ROOT / "traces" / "eagle3-qa"), "--top", "1")
    assert code == 0, err
    assert "mix draft kinds (eagle3, model)" in " ".join(out.split())
    assert "--speculative-algorithm EAGLE3" not in out


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("traces")
    write_trace(d / "a", *tiny_trace(11))
    return d


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_tune_sweep_and_replay_draw_their_plot(traces, tmp_path, capsys, suffix):
    pytest.importorskip("matplotlib")
    runs = {
        "tune": ["tune", str(traces), "--top", "1"],
        "sweep": ["sweep", str(traces), "--out", str(tmp_path / "sw"), "--jobs", "1", "--budget", "2,4"],
        "replay": ["replay", str(traces), "--policy", "ar,confidence,ecospec"],
    }
    for name, argv in runs.items():
        plot = tmp_path / f"{name}{suffix}"
        code, _, err = _run(capsys, *argv, "--plot", str(plot))
        assert code == 0, err
        data = plot.read_bytes()
        assert data.startswith(PNG) if suffix == ".png" else b"<svg" in data[:1000], name


@pytest.mark.parametrize("command", ["tune", "sweep", "replay"])
def test_a_bad_plot_file_is_one_line_before_any_work(traces, tmp_path, capsys, command):
    extra = ["--out", str(tmp_path / "sw")] if command == "sweep" else []
    code, out, err = _run(capsys, command, str(traces), *extra, "--plot", str(tmp_path / "p.jpg"))
    assert code == 2 and out == "" and err.count("\n") == 1 and ".png or .svg" in err
    assert not (tmp_path / "sw").exists()


def test_without_matplotlib_plot_is_one_line_saying_how_to_install(traces, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    code, out, err = _run(capsys, "replay", str(traces), "--plot", str(tmp_path / "p.png"))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "pip install 'ecosim[reports]'" in err and not (tmp_path / "p.png").exists()
