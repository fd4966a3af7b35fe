"""The README's two set-up commands are the ones CI runs, and the README says how to run them."""

import re

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
