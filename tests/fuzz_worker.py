"""Running reader-fuzz cases: `run_case` lays one case out, reads it with one of the three readers under a
wall-clock alarm, and `judge`s the outcome against the reference; `worker` runs a stride of cases in a process
whose address space is capped and reports its failures, slowest case and peak resident memory.
tests/test_fuzz_readers.py starts this file as a script, one process per worker.
"""

from __future__ import annotations

import json
import signal
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # run as a worker script
    sys.path.insert(0, str(HERE))

from fuzz_kinds import KINDS, make_case  # noqa: E402
from fuzz_reference import reference  # noqa: E402
from fuzz_traces import FILES, MANIFEST, Case, lay_out  # noqa: E402

CASE_LIMIT_S = 5.0  # no single case may take more CPU seconds (CPU, not wall: other jobs on the machine do not count)
HANG_S = 6 * CASE_LIMIT_S  # wall seconds after which a case counts as hung
ADDRESS_SPACE_GB = 4  # RLIMIT_AS of a worker: an allocation past it fails inside the case


class CaseTimeout(BaseException):
    pass


def _alarm(*_):
    raise CaseTimeout


def _readers():
    from ecosim.trace.io import check_trace, iter_request_chunks, read_trace

    return {
        "check_trace": check_trace,
        "read_trace": read_trace,
        "iter_request_chunks": lambda p: list(iter_request_chunks(p, 40)),
    }


def run_case(i: int, path: Path, readers) -> dict[str, Any]:
    """One case: lay it out, read it, compare with the reference. Returns what happened."""
    from ecosim.errors import EcoSimError

    kind, case = make_case(i)
    lay_out(case, path)
    reader = list(readers)[(i // len(KINDS)) % len(readers)]
    out: dict[str, Any] = {"i": i, "kind": kind, "what": case.what, "reader": reader}
    t0 = time.process_time()
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, HANG_S)
    try:
        readers[reader](path)
        out["outcome"], out["message"] = "ok", ""
    except EcoSimError as e:
        out["outcome"], out["message"] = "refused", str(e)
    except CaseTimeout:
        out["outcome"], out["message"] = "crash", f"no answer after {HANG_S:g} s"
    except Exception as e:  # noqa: BLE001 - what the fuzzer is looking for
        out["outcome"] = "crash"
        out["message"] = f"{type(e).__name__}: {str(e)[:300]} at {traceback.extract_tb(e.__traceback__)[-1].filename}:" \
                         f"{traceback.extract_tb(e.__traceback__)[-1].lineno}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    out["seconds"] = time.process_time() - t0  # CPU seconds of this process
    # The reference decides whenever the mutation may have left the trace valid (a refusal of a
    # must-fail case needs no second opinion; that saves a third of the time).
    out["reference"] = "must fail" if case.must_fail and out["outcome"] == "refused" else reference(path)
    out["problem"] = judge(out, case, path)
    return out


def judge(out: dict[str, Any], case: Case, path: Path) -> str | None:
    msg, ref = out["message"], out["reference"]
    if out["outcome"] == "crash":
        return f"not a one-line EcoSimError: {msg}"
    if out["seconds"] > CASE_LIMIT_S:
        return f"took {out['seconds']:.1f} CPU s"
    if out["outcome"] == "ok":
        if ref is not None:
            return f"accepted, but it breaks the format ({ref})"
        if case.must_fail:
            return "accepted, but the mutation must break it"
        return None
    if "memory budget allows" in msg:  # iter_request_chunks' budget (checked first), not a verdict
        return None if "\n" not in msg else f"not one line: {msg[:300]!r}"
    if ref is None:
        if case.raw and case.damaged and f"{case.damaged}: not a readable Parquet file" in msg:
            return None
        return f"refused a valid trace: {msg}"
    if "\n" in msg or "\r" in msg or len(msg) > 1000:
        return f"not one short line: {msg[:300]!r}"
    if str(path) not in msg or not any(f in msg for f in FILES):
        return f"does not name the trace and the file: {msg}"
    if case.damaged and case.must_fail and case.damaged not in msg and case.damaged != MANIFEST:
        return f"does not name the damaged file {case.damaged}: {msg}"
    return None


def _peak_rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker(first: int, step: int, count: int, workdir: Path, progress: Path) -> dict[str, Any]:
    """Cases first, first + step, ... (count of them); a summary for the test.

    The address space is capped, so a huge allocation is a MemoryError in the case that made it
    (reported as a failure), never the machine's OOM killer.
    """
    import resource

    cap = ADDRESS_SPACE_GB << 30
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    readers = _readers()
    path = workdir / "trace"
    failures, outcomes, refused = [], Counter(), {}
    slowest = (0.0, -1)
    t0 = time.perf_counter()
    for j in range(count):
        i = first + j * step
        if j % 64 == 0:
            progress.write_text(str(i))
        r = run_case(i, path, readers)
        outcomes[f"{r['kind']}:{r['outcome']}"] += 1
        slowest = max(slowest, (r["seconds"], i))
        if r["problem"]:
            failures.append({k: r[k] for k in ("i", "kind", "what", "reader", "problem", "reference")})
        elif r["outcome"] == "refused":
            refused.setdefault(r["kind"], []).append(i)
    return {"cases": count, "failures": failures, "outcomes": dict(outcomes), "refused": refused,
            "slowest": slowest, "peak_rss_mb": _peak_rss_mb(), "seconds": time.perf_counter() - t0}


if __name__ == "__main__" and len(sys.argv) == 6 and sys.argv[1] == "worker":
    first, step, count, workdir = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5])
    print(json.dumps(worker(first, step, count, workdir, workdir / "progress")))
