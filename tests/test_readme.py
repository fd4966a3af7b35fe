"""The README's two set-up commands are the ones CI runs, and the README says how to run them."""

import re

import pytest

from conftest import ROOT


def readme_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), flags=re.S)
    return [b.strip() for b in blocks[:2]]


def test_readme_has_exactly_the_main_and_test_commands():
    main, test = readme_commands()
    assert "ecosim replay traces/ --bw 3.3TB/s" in main and "python3 -m venv" in main
    assert "pytest" in test and "torch" not in main


def test_ci_runs_the_readme_commands_verbatim():
    ci = (ROOT / ".ci" / "run").read_text()
    for command in readme_commands():
        assert command in ci.splitlines()


def test_torch_is_pinned_in_the_install_files():
    text = (ROOT / "pyproject.toml").read_text()
    assert '"torch==2.13.0"' in text and '"transformers==5.24.0"' in text


def readme_replay_block() -> str:
    """The block the README shows under "`ecosim replay traces/ --bw 3.3TB/s` prints:"."""
    text = (ROOT / "README.md").read_text()
    m = re.search(r"`ecosim replay traces/ --bw 3\.3TB/s` prints:\n\n```\n(.*?)\n```", text, flags=re.S)
    assert m, "the README's replay block is missing"
    return m.group(1)


def test_readme_replay_block_is_what_the_command_prints():
    """Regenerate with `COLUMNS=200 ecosim replay traces/ --bw 3.3TB/s` (trailing spaces stripped)."""
    import os
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "ecosim.cli", "replay", "traces/", "--bw", "3.3TB/s"], capture_output=True,
                       text=True, cwd=ROOT, env={**os.environ, "COLUMNS": "200"}, timeout=600)
    assert r.returncode == 0, r.stderr
    printed = "\n".join(line.rstrip() for line in r.stdout.rstrip().splitlines())
    assert readme_replay_block() == printed
    assert "\nverdict: fastest over 8 traces: " in printed  # the README shows the verdict the command ends with


def readme_temperature_block() -> str:
    """The block under "**The tune answer at T = 0 and at T = 0.7 (synthetic).**"."""
    text = (ROOT / "README.md").read_text()
    m = re.search(r"\*\*The tune answer at T = 0 and at T = 0\.7 \(synthetic\)\.\*\*.*?\n```\n(.*?)\n```", text, flags=re.S)
    assert m, "the README's tune-at-two-temperatures block is missing"
    return m.group(1)


def test_readme_tune_at_two_temperatures_is_what_the_commands_print(tmp_path):
    """Each `$ ecosim ...` line of the block is run (in a scratch folder, COLUMNS=200); the lines under it are lines
    it prints (trailing spaces stripped). Regenerate by running the block's commands."""
    import os
    import shlex
    import subprocess
    import sys

    steps: list[tuple[list[str], list[str]]] = []
    for line in readme_temperature_block().splitlines():
        if line.startswith("$ ecosim "):
            steps.append((shlex.split(line[len("$ ecosim "):]), []))
        else:
            steps[-1][1].append(line)
    assert [s[0][0] for s in steps] == ["synth", "synth", "tune", "tune", "tune"]
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT)}
    for args, expected in steps:
        r = subprocess.run([sys.executable, "-m", "ecosim.cli", *args], capture_output=True, text=True, cwd=tmp_path,
                           env=env, timeout=600)
        assert r.returncode == 0, r.stderr
        printed = [x.rstrip() for x in r.stdout.splitlines()]
        for want in expected:
            assert want in printed, (args, want)


def test_the_first_screen_shows_tune_right_after_the_main_command_with_what_it_prints():
    """`ecosim tune` follows the main command on the README's first screen, and the block under it is
    what it prints (regenerate it with the command above it when tune's output changes)."""
    import subprocess
    import sys

    text = (ROOT / "README.md").read_text()
    blocks = list(re.finditer(r"```(\w*)\n(.*?)\n```", text, flags=re.S))
    main = next(i for i, b in enumerate(blocks) if "ecosim replay traces/ --bw 3.3TB/s" in b[2])
    command, printed = blocks[main + 1], blocks[main + 2]
    assert command[1] == "sh" and command[2].startswith(".venv/bin/ecosim tune ")
    assert text[:command.start()].count("\n") < 40  # on the first screen
    argv = command[2].split()[1:]
    r = subprocess.run([sys.executable, "-m", "ecosim.cli", *argv], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert [line.rstrip() for line in r.stdout.splitlines()] == printed[2].splitlines()
    assert "--speculative-algorithm EAGLE3 --speculative-draft-model-path models/ecosim-tiny/eagle3" in printed[2]


@pytest.mark.parametrize("name", ["gptoss-h100", "gptoss-h100-8"])
def test_the_worked_user_question_prints_what_the_readme_shows(tmp_path, name):
    """The README's worked example (a user's question, from question to answer, at batch 1 and with
    eight users at once) is what its two commands print."""
    import os
    import subprocess
    import sys

    text = (ROOT / "README.md").read_text()
    m = re.search(rf"```sh\n(ecosim synth {name} [^\n]*)\n(ecosim tune {name} [^\n]*)\n```\n\n```\n(.*?)\n```", text, flags=re.S)
    assert m, "the README's worked user question is missing"
    env = {**os.environ, "COLUMNS": "200"}
    for i in (1, 2):
        r = subprocess.run([sys.executable, "-m", "ecosim.cli", *m.group(i).split()[1:]], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
    assert [line.rstrip() for line in r.stdout.rstrip().splitlines()] == m.group(3).splitlines()
    assert "recommendation for vllm:" in m.group(3) and '"num_speculative_tokens"' in m.group(3)
    if "--concurrency" in m.group(2):  # the text's batch-1 figure for the same requests: the same tune without it
        alone = m.group(2).split(" --concurrency")[0].split()[1:]
        r = subprocess.run([sys.executable, "-m", "ecosim.cli", *alone], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300)
        x = re.search(r"recommendation for vllm: .*?, ([0-9.]+x) plain decoding", r.stdout).group(1)
        assert f"one at a time give {x}" in " ".join(text.split())
