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
