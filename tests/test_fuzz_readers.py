"""Fuzz the trace reader: 10,240 generated malformed traces, each refused in one line or provably valid.

tests/test_trace_format.py breaks one invariant at a time (a table of mutations, plus hypothesis
over single cells and whole-file damage). This file scales that up and widens the kinds: damaged
Parquet bytes (truncations, bit flips, footer damage, garbage, spliced files), wrong column types,
nulls (also inside the expert lists), out-of-range and repeated experts, cycles and orphans in the
trees, non-finite probabilities, inconsistent manifests (counts, names, versions, shapes), huge
counts, and files that are not files (directories, FIFOs, /dev/zero).

Every case is generated in-process from a small valid synthetic trace by a seeded mutation (the kinds:
tests/fuzz_kinds_parquet.py, tests/fuzz_kinds_manifest.py), then read by one of the three readers
(`check_trace`, `read_trace`, `iter_request_chunks`). The verdict is compared with an independent,
deliberately plain restatement of TRACE_FORMAT.md (`reference`, tests/fuzz_reference.py):

- the reader refuses  <=> the reference finds the trace invalid, and a refusal is an `EcoSimError`
  whose message is one line naming the trace and the file at fault;
- anything else (another exception, a case over 5 s, a worker over its memory bound) fails.

Cases run in two worker processes (tests/fuzz_worker.py run as a script), each reporting its failures, its
slowest case and its peak resident memory. A sample of 50 refused cases then goes through the real
`ecosim check` in subprocesses: exit status 2, one line on stderr, no traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from fuzz_kinds import KINDS, make_case
from fuzz_reference import reference
from fuzz_traces import Base, Case, lay_out
from fuzz_worker import CASE_LIMIT_S, _readers, run_case

CASES = 10_240
WORKERS = 2
PEAK_RSS_LIMIT_MB = 1024  # a worker's peak resident memory, imports included
WORKER = Path(__file__).resolve().parent / "fuzz_worker.py"


def _run_workers(tmp_path: Path, cases: int) -> list[dict[str, Any]]:
    procs = []
    for w in range(WORKERS):
        d = tmp_path / f"w{w}"
        d.mkdir()
        count = len(range(w, cases, WORKERS))
        cmd = [sys.executable, str(WORKER), "worker", str(w), str(WORKERS), str(count), str(d)]
        procs.append((subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), d))
    results = []
    for proc, d in procs:
        try:
            out, err = proc.communicate(timeout=900)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            pytest.fail(f"a fuzz worker hung; last case batch started at {(d / 'progress').read_text()}")
        assert proc.returncode == 0, f"worker died ({proc.returncode}); last batch at {(d / 'progress').read_text()}: {err[-3000:]}"
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def _ecosim_check(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ecosim.cli", "check", str(path)], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)


@pytest.mark.slow
def test_ten_thousand_malformed_traces(tmp_path):
    results = _run_workers(tmp_path, CASES)
    failures = [f for r in results for f in r["failures"]]
    outcomes: Counter = Counter()
    for r in results:
        outcomes.update(r["outcomes"])
    assert sum(r["cases"] for r in results) == CASES >= 10_000
    assert not failures, f"{len(failures)} cases failed, e.g.:\n" + "\n".join(json.dumps(f) for f in failures[:15])
    # Every kind was generated, and every kind that can be refused was (a mutation that never
    # breaks anything would be a hole in the fuzzer, not a pass).
    for kind in KINDS:
        assert outcomes[f"{kind}:refused"] + outcomes[f"{kind}:ok"] >= CASES // len(KINDS) - 1, kind
        if kind != "extra_and_reordered":
            assert outcomes[f"{kind}:refused"] > 0, kind
    assert outcomes["extra_and_reordered:refused"] == 0
    slowest = max(r["slowest"] for r in results)
    assert slowest[0] < CASE_LIMIT_S, f"case {slowest[1]} took {slowest[0]:.1f} CPU s"
    peak = max(r["peak_rss_mb"] for r in results)
    assert peak < PEAK_RSS_LIMIT_MB, f"a fuzz worker peaked at {peak:.0f} MB resident"
    refusals = sum(v for k, v in outcomes.items() if k.endswith(":refused"))
    print(f"{CASES} cases in {max(r['seconds'] for r in results):.0f} s ({WORKERS} workers): {refusals} refused, "
          f"{CASES - refusals} valid by the reference and accepted; slowest case {slowest[0] * 1e3:.0f} ms; "
          f"peak resident {peak:.0f} MB")

    # A sample through the real command: exit 2, one line on stderr, no traceback.
    refused: dict[str, list[int]] = {}
    for r in results:
        for kind, ids in r["refused"].items():
            refused.setdefault(kind, []).extend(ids)
    sample: list[int] = []
    rounds = 0
    while len(sample) < 50 and rounds < 50:
        for kind in sorted(refused):
            if rounds < len(refused[kind]) and len(sample) < 50:
                sample.append(sorted(refused[kind])[rounds])
        rounds += 1
    assert len(sample) == 50
    dirs = []
    for i in sample:
        d = tmp_path / "cli" / str(i)
        d.parent.mkdir(exist_ok=True)
        lay_out(make_case(i)[1], d)
        dirs.append(d)
    with ThreadPoolExecutor(WORKERS) as pool:
        runs = list(pool.map(_ecosim_check, dirs))
    for i, d, r in zip(sample, dirs, runs):
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and r.stdout == "", (i, make_case(i)[0], r.returncode, r.stdout, r.stderr[-2000:])
        assert len(lines) == 1 and lines[0].startswith("ecosim: error: ") and "Traceback" not in r.stderr, (i, r.stderr)


def test_the_reference_agrees_on_the_base_traces_and_a_few_cases(tmp_path):
    """Quick (not slow): the base traces are valid for both readers; a few cases of each kind run."""
    from ecosim.trace.io import check_trace

    for gates in (False, True):
        d = tmp_path / f"base{gates}"
        lay_out(Case(Base(11, gates)), d)
        assert reference(d) is None
        check_trace(d)
    readers = _readers()
    for i in range(2 * len(KINDS)):
        r = run_case(i, tmp_path / "case", readers)
        assert r["problem"] is None, r
