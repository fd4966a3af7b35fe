"""The `tracer` command line: one-line errors with exit status 2, help everywhere, no weights offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tracer.cli import app, main
from tracer.drafts.registry import parse
from tracer.loading import hub_offline, resolve
from tracer.registry import ENTRIES, lookup

ROOT = Path(__file__).resolve().parents[2]


def run_main(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(argv)
        raise SystemExit(0)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def _one_line_error(code: int, err: str) -> str:
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tracer: error: "), err
    assert "Traceback" not in err
    return lines[0]


def test_deepseek_without_weights_fails_in_one_line(prompts_file, tmp_path):
    """The real registry entry, no weights here: exit 2, one line naming the id it tried."""
    env = dict(os.environ, HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    exe = Path(sys.executable).parent / "tracer"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "tracer.cli"]
    r = subprocess.run(cmd + ["record", "--model", "deepseek-v3.1", "--prompts", str(prompts_file),
                              "--out", str(tmp_path / "t")], env=env, capture_output=True, text=True, timeout=120)
    line = _one_line_error(r.returncode, r.stderr)
    assert "deepseek-ai/DeepSeek-V3.1" in line and "offline" in line
    assert not (tmp_path / "t").exists()


def test_unreachable_hub_is_detected_and_obeyed(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: nothing listens
    assert hub_offline(timeout=2.0) is True
    assert os.environ["HF_HUB_OFFLINE"] == "1"


@pytest.mark.parametrize("args,needle", [
    (["record", "--model", "x", "--out", "o"], "Missing option '--prompts'"),
    (["record", "--model", "x", "--prompts", "P", "--out", "O", "--depth", "abc"], "--depth"),
    (["record", "--model", "x", "--prompts", "P", "--out", "O", "--depth", "0"], "--depth"),
    (["record", "--model", "x", "--prompts", "P", "--out", "O", "--max-nodes", "40000"], "--max-nodes"),
    (["record", "--model", "x", "--prompts", "P", "--out", "O", "--dtype", "int8"], "--dtype"),
    (["record", "--model", "x", "--prompts", "P", "--out", "O", "--attn", "flash"], "--attn"),
    (["record", "--model", "./no/such/dir", "--prompts", "P", "--out", "O"], "no such directory"),
    (["record", "--model", "not-a-model", "--prompts", "P", "--out", "O"], "unknown model name"),
    (["record", "--model", "x", "--prompts", "missing.jsonl", "--out", "O"], "missing.jsonl: no such file"),
    (["record", "--model", "T", "--draft", "early-exit:99", "--prompts", "P", "--out", "O"], "early-exit:99"),
    (["record", "--model", "T", "--draft", "early-exit:two", "--prompts", "P", "--out", "O"], "early-exit:N"),
    (["record", "--model", "T", "--draft", "./nope", "--prompts", "P", "--out", "O"], "--draft ./nope"),
    (["record", "--model", "T", "--prompts", "P", "--out", "O", "--device", "tpu:7"], "--device tpu:7"),
    (["tiny", "--family", "llama", "--out", "O"], "unknown family"),
    (["frobnicate"], "No such command"),
])
def test_bad_input_is_one_line_and_status_2(args, needle, capsys, tmp_path, tiny_dirs, prompts_file):
    subst = {"P": str(prompts_file), "O": str(tmp_path / "out"), "T": str(tiny_dirs["mixtral"])}
    code, _, err = run_main([subst.get(a, a) for a in args], capsys)
    assert needle in _one_line_error(code, err)


def test_bad_prompt_files(capsys, tmp_path, tiny_dirs):
    cases = {
        "notjson.jsonl": "{oops\n",
        "notask.jsonl": json.dumps({"text": "hi"}) + "\n",
        "both.jsonl": json.dumps({"task": "qa", "text": "hi", "input_ids": [1]}) + "\n",
        "bigid.jsonl": json.dumps({"task": "qa", "input_ids": [1, 999999]}) + "\n",
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        code, _, err = run_main(["record", "--model", str(tiny_dirs["olmoe"]), "--prompts", str(tmp_path / name),
                                 "--out", str(tmp_path / "o")], capsys)
        assert name in _one_line_error(code, err)


def test_refuses_to_overwrite_without_resume_or_force(capsys, tmp_path, tiny_dirs, prompts_file):
    argv = ["record", "--model", str(tiny_dirs["qwen3_moe"]), "--prompts", str(prompts_file), "--out", str(tmp_path / "t"),
            "--max-new-tokens", "2", "--depth", "2", "--topk", "2", "--quiet", "--threads", "1"]
    code, _, err = run_main(argv, capsys)
    assert code == 0 and (tmp_path / "t" / "manifest.json").is_file(), err
    code, _, err = run_main(argv, capsys)
    assert "--resume" in _one_line_error(code, err)
    code, _, err = run_main(argv + ["--force"], capsys)
    assert code == 0, err
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "keep.txt").write_text("mine")
    code, _, err = run_main(argv[:5] + ["--out", str(tmp_path / "junk")] + argv[7:], capsys)
    assert "not a trace" in _one_line_error(code, err)


def test_every_option_has_help(capsys):
    import typer.main

    group = typer.main.get_command(app)
    for name, cmd in group.commands.items():
        assert cmd.help, name
        for p in cmd.params:
            assert getattr(p, "help", None), f"tracer {name} {p.name}: no help"
    code, out, _ = run_main(["record", "--help"], capsys)
    assert code == 0 and "--max-nodes" in out and "speculative_num_steps" in out


def test_tiny_command_writes_loadable_checkpoints(capsys, tmp_path):
    code, _, err = run_main(["tiny", "--family", "gpt_oss", "--out", str(tmp_path / "g")], capsys)
    assert code == 0, err
    for sub in ("target", "draft"):
        d = tmp_path / "g" / sub
        assert (d / "config.json").is_file() and (d / "tokenizer.json").is_file()
        assert list(d.glob("*.safetensors")) and not list(d.glob("*.bin"))
    src = resolve(str(tmp_path / "g"))
    assert src.local and src.ref.endswith("target") and src.default_draft.endswith("draft")


def test_registry_entries():
    names = {"deepseek-v3.1", "qwen3-235b-a22b", "qwen3-30b-a3b", "gpt-oss-120b", "gpt-oss-20b", "mixtral-8x7b", "olmoe-1b-7b"}
    assert names <= {e.name for e in ENTRIES}
    assert lookup("deepseek-v3.1").hub_id == "deepseek-ai/DeepSeek-V3.1" and lookup("DeepSeek-V3").name == "deepseek-v3.1"
    for e in ENTRIES:
        src = resolve(e.name)
        assert not src.local and src.ref == e.hub_id and src.default_draft == e.draft
        kind, arg = parse(e.draft)  # a valid --draft value of a known kind
        assert kind.name != "model" or lookup(arg) is not None or "/" in arg
    assert lookup("openai/gpt-oss-20b").attn == "eager"
