"""A fork server for the kill tests: a "zygote" process that imported a command's modules once and never ran any
work, then forks a child per run of the real command-line entry point (`ecosim.cli.main`, `tracer.cli.main`) with
real arguments.

Fifty fresh processes would spend most of their time importing (torch + transformers alone take
~5 s here); a fork starts in milliseconds. The zygote only forks children on request and reaps them when told
to, so a pid a test kills is always its own (a zombie at worst). Used by tests/test_faults_kills.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import ROOT


KILLS = 50


ZYGOTE = r"""
import json, os, sys, traceback
kind = sys.argv[1]
if kind == "tracer":
    import torch
    torch.set_num_threads(1)
    import safetensors.torch, tokenizers, tracer.record, tracer.pair, tracer.tree, tracer.verify  # noqa: F401
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast  # noqa: F401
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM  # noqa: F401  (lazy modules, imported now)
    from tracer.cli import main as entry
else:
    import ecosim.cli.sweep, ecosim.cli.traces, ecosim.cli.replay, ecosim.cli.predictor, ecosim.cli.report  # noqa: F401
    import ecosim.sweep.runner, ecosim.sweep.tasks  # noqa: F401
    from ecosim.cli import main as _main
    def entry(argv):
        sys.exit(_main(argv))
print("ready", flush=True)
for line in sys.stdin:
    msg = json.loads(line)
    if "reap" in msg:
        _, status = os.waitpid(msg["reap"], 0)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        print(json.dumps({"status": code}), flush=True)
        continue
    pid = os.fork()
    if pid == 0:
        os.setsid()
        os.environ.update(msg.get("env", {}))
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        err = os.open(msg["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(err, 2)
        code = 0
        try:
            entry(msg["argv"])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            traceback.print_exc()
            code = 99
        sys.stderr.flush()
        os._exit(code)
    print(json.dumps({"pid": pid}), flush=True)
"""


class Zygote:
    """A process that imported the commands once and forks a child per run."""

    def __init__(self, kind: str, tmp: Path):
        self.tmp = tmp
        env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
                   OMP_NUM_THREADS="1")
        self.proc = subprocess.Popen([sys.executable, "-c", ZYGOTE, kind], cwd=ROOT, env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self._read() == "ready"

    def _read(self) -> str:
        line = self.proc.stdout.readline()
        assert line, "the zygote died"
        return line.strip()

    def _send(self, msg: dict) -> dict:
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        return json.loads(self._read())

    def run(self, argv: list[str], kill_after: float | None, limit: float = 120.0,
            env: dict[str, str] | None = None) -> tuple[int, bool, str, float]:
        """Run `argv` in a fresh fork (with `env` added); SIGKILL it after `kill_after` s if still running.

        Returns (exit status, whether the kill landed, stderr, seconds it ran)."""
        err = self.tmp / "child.err"
        pid = self._send({"argv": argv, "stderr": str(err), "env": env or {}})["pid"]
        t0 = time.monotonic()
        deadline = t0 + (kill_after if kill_after is not None else limit)
        killed = False
        while True:  # poll without reaping: the pid stays ours (a zombie at worst) until reaped
            state = _proc_state(pid)
            if state in ("Z", None):
                break
            if time.monotonic() >= deadline:
                os.kill(pid, signal.SIGKILL)
                killed = kill_after is not None
                assert killed, f"{argv[0]} ran longer than {limit} s"
                break
            time.sleep(0.001)
        ran = time.monotonic() - t0
        status = self._send({"reap": pid})["status"]
        return status, killed and status == -signal.SIGKILL, err.read_text(), ran

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def _proc_state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None
