"""`validate run` is resumable: rounds committed as they end, the same command continues, Ctrl-C says so."""

from __future__ import annotations

import json

from validate.cli import main
from validate.parts import INTERRUPT_AFTER_ROUND
from vhelpers import TREE

TREE_FLAGS = ["--depth", str(TREE["depth"]), "--topk", str(TREE["topk"]), "--max-nodes", str(TREE["max_nodes"])]


def _cmd(tiny_pair_dir, prompts_path, run, repeats="2"):
    return ["run", "--model", str(tiny_pair_dir), "--draft", str(tiny_pair_dir / "target"), "--prompts", str(prompts_path),
            "--max-prompts", "2", "--policy", "confidence", "--budget", "4", "--out", str(run), "--max-new-tokens", "8",
            "--repeats", repeats, "--calib-tokens", "1,4", "--calib-repeats", "1", "--quiet", "--no-fail", *TREE_FLAGS]


def test_interrupted_run_continues_where_it_stopped(tmp_path, tiny_pair_dir, prompts_path, capsys, monkeypatch):
    run = tmp_path / "run"
    cmd = _cmd(tiny_pair_dir, prompts_path, run)
    # 2 requests x 2 repeats = 4 rounds; Ctrl-C right after the second is committed
    monkeypatch.setenv(INTERRUPT_AFTER_ROUND, "2")
    assert main(cmd) == 130
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("validate: interrupted; 2 of 4 request rounds"), err
    assert "rerun the same command to continue" in err
    parts = run / "parts"
    kept = {p.name: p.read_text() for p in parts.glob("round-*.json")}
    assert sorted(kept) == ["round-0-0.json", "round-0-1.json"]
    assert json.loads((parts / "calibration.json").read_text())["done"] > 0  # the calibration's runs so far
    assert not (run / "measured.json").exists()

    # another command into the same folder is refused, naming the option that differs
    monkeypatch.delenv(INTERRUPT_AFTER_ROUND)
    assert main(_cmd(tiny_pair_dir, prompts_path, run, repeats="3")) == 2
    err = capsys.readouterr().err
    assert "repeats: 2 there, 3 now" in err and "--force" in err

    # the same command continues: the committed rounds are taken as they are, the other two decoded
    from validate import decode

    calls = []
    real = decode.SpecDecoder.decode

    def counting(self, selector, rid, prompt):
        if self.max_new_tokens == 8:  # timed decodes (the untimed warm-up decodes 4 tokens)
            calls.append(rid)
        return real(self, selector, rid, prompt)

    monkeypatch.setattr(decode.SpecDecoder, "decode", counting)
    assert main(cmd) == 0, capsys.readouterr().err
    assert "lossless: yes" in capsys.readouterr().out
    assert len(calls) == 2 * 2  # two rounds x two policies (the winner confidence b=4, and ar)
    for name, text in kept.items():
        assert (parts / name).read_text() == text
    assert len(list(parts.glob("round-*.json"))) == 4
    doc = json.loads((run / "comparison.json").read_text())
    assert doc["lossless"] and all(p["tokens"] == 16 for p in doc["policies"])

    # a finished run rerun with the same command decodes nothing and compares again
    calls.clear()
    assert main(cmd) == 0
    capsys.readouterr()
    assert calls == []
