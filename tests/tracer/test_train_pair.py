"""The default pair's training script: its model card and its command line.

The expected cards under `data/card/` were rendered by the single-file `tracer/train_pair.py`
before it became the `tracer.training` package: the card must stay byte-identical for the same
figures. `two_stages.json` is the committed pair's `train_metrics.json`; `one_stage.json` drops
the second stage, the CPU time and the per-task balance; `targets_missed.json` misses the targets.
One change since, on purpose: the two-stage cards gained the paragraph on what the second stage
costs in routing locality; the expected files were rendered again, that paragraph their only change.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracer.train_pair import main, write_card

DATA = Path(__file__).parent / "data" / "card"
CASES = sorted(p.stem for p in DATA.glob("*.json"))


def test_there_are_cards_to_compare():
    assert CASES == ["one_stage", "targets_missed", "two_stages"]


@pytest.mark.parametrize("case", CASES)
def test_the_card_renders_as_before(case, tmp_path):
    metrics = json.loads((DATA / f"{case}.json").read_text(encoding="utf-8"))
    write_card(tmp_path, metrics)
    assert (tmp_path / "MODEL_CARD.md").read_bytes() == (DATA / f"{case}.md").read_bytes()


def test_missed_targets_are_marked():
    """The verdict column comes from the figures: the case misses every whole-pair target and
    two of the per-task ones (coding set to 5.1x, qa at 4.21x in the committed figures)."""
    text = (DATA / "targets_missed.md").read_text(encoding="utf-8")
    section = text.split("## Against the project's targets")[1]
    rows = [r for r in section.splitlines() if r.startswith("| ") and not r.startswith("| target ")]
    assert sum(r.endswith("| **no** |") for r in rows) == 7
    assert sum(r.endswith("| yes |") for r in rows) == 2


def test_card_only_rewrites_the_card_from_the_metrics(tmp_path, capsys):
    (tmp_path / "train_metrics.json").write_bytes((DATA / "two_stages.json").read_bytes())
    assert main(["--out", str(tmp_path), "--card-only"]) == 0
    assert (tmp_path / "MODEL_CARD.md").read_bytes() == (DATA / "two_stages.md").read_bytes()
    assert "[card] rewrote" in capsys.readouterr().out


@pytest.mark.slow
def test_a_tiny_run_end_to_end(tmp_path):
    """Train a few steps on two stdlib files, measure, save and write the card (about 5 s)."""
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    (prompts / "coding.jsonl").write_text('{"task": "coding", "text": "def add(a, b):"}\n', encoding="utf-8")
    out = tmp_path / "pair"
    argv = ["--out", str(out), "--max-files", "2", "--steps", "3", "--batch", "2", "--seq-len", "32",
            "--vocab-size", "300", "--val-tokens", "256", "--gen-tokens", "4", "--prompts", str(prompts),
            "--threads", "1", "--log-every", "10"]
    assert main(argv) == 0
    m = json.loads((out / "train_metrics.json").read_text(encoding="utf-8"))
    assert m["args"]["target_steps"] == m["args"]["draft_steps"] == 3
    assert m["args"]["warmup"] == 1  # capped at a tenth of the steps
    assert m["vocab_size"] <= 300 and m["greedy"]["prompts"] == 1
    assert m["target_params"]["active_per_token"] < m["target_params"]["total"]
    for sub in ("target", "draft"):
        assert (out / sub / "model.safetensors").is_file() and (out / sub / "tokenizer.json").is_file()
    card = (out / "MODEL_CARD.md").read_text(encoding="utf-8")
    assert card.startswith("# ecosim-tiny") and "python -m tracer.train_pair --out" in card


def test_the_verdicts_follow_the_targets_as_data():
    """The thresholds live in `PairTargets`: loosen the share and every balance row is met."""
    from tracer.training.card import target_rows
    from tracer.training.config import TARGETS, PairTargets

    metrics = json.loads((DATA / "two_stages.json").read_text(encoding="utf-8"))
    strict = target_rows(metrics, TARGETS)
    loose = target_rows(metrics, PairTargets(max_share=10.0))
    assert [ok for label, _, ok in strict if "fair share" in label] != [True] * 5
    assert [ok for label, _, ok in loose if "fair share" in label] == [True] * 5
    assert any("10x its fair share" in label for label, _, _ in loose)
