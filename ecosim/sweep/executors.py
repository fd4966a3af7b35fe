"""Where tasks run: a local process pool, or a Ray cluster. Same tasks, same function, same results.

Each executor yields (task, rows) as tasks finish, in completion order; the driver commits each
task's rows as a part right away, so the order tasks finish in never changes the results file.

- `local`: `--jobs N` processes (spawned, so no state leaks from the driver); `--jobs 1` runs the
  tasks in the driver itself, one after another.
- `ray`: `ray.init(address=...)` when an address is given (the nodes need ecosim installed and the
  traces at the same paths, e.g. on a shared filesystem), a local Ray with N CPUs otherwise.
  A local Ray leaves nothing behind (`_local_ray`): its session folder is a private temporary folder
  removed after shutdown (unless RAY_TMPDIR says where it goes), and its authentication token is
  given in the environment for this run, so Ray does not save one to ~/.ray/auth_token.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any

from ecosim.errors import EcoSimError
from ecosim.sweep.grid import Task
from ecosim.sweep.tasks import run_task

EXECUTORS = ("local", "ray")
RAY_MISSING = "--executor ray needs Ray, which is not installed; install it with: pip install 'ecosim[ray]'"

Done = Iterator[tuple[Task, list[tuple[str, dict[str, Any]]]]]


def default_jobs() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _exit_with_parent(parent: int) -> None:
    """Initializer of every pool worker: a worker never outlives the sweep that started it (killed with
    SIGKILL, the driver cannot shut its pool down). Linux: the kernel sends SIGKILL when the parent dies;
    elsewhere a thread polls the parent's pid. A worker says no warnings: the driver, which planned the same
    configurations, has said each once."""
    import signal
    import threading
    import time
    import warnings

    from ecosim.gate.values import EcoSimWarning

    warnings.simplefilter("ignore", EcoSimWarning)

    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent died before the line above took effect
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()


def run_local(tasks: list[Task], jobs: int) -> Done:
    if jobs <= 1 or len(tasks) <= 1:
        for t in tasks:
            yield t, run_task(t)
        return
    pool = ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=mp.get_context("spawn"),
                               initializer=_exit_with_parent, initargs=(os.getpid(),))
    try:
        pending = {pool.submit(run_task, t): t for t in tasks}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for f in finished:
                yield pending.pop(f), f.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise EcoSimError(RAY_MISSING) from None
    return ray


RAY_REACH_S = 5.0  # seconds to reach a cluster's address before saying it cannot be reached


def check_ray_address(address: str) -> None:
    """A cluster address (`HOST:PORT` or `ray://HOST:PORT`) must answer a TCP connect within RAY_REACH_S:
    Ray itself retries an unreachable one for minutes. `auto` and `local` are Ray's own words, left to it."""
    import socket

    if address in ("auto", "local"):
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535:
        raise EcoSimError(f"--ray-address {address!r}: expected HOST:PORT, ray://HOST:PORT or auto")
    try:
        socket.create_connection((host, int(port)), timeout=RAY_REACH_S).close()
    except OSError as e:
        raise EcoSimError(f"--ray-address {address}: cannot reach it ({e.strerror or e or 'timed out'}); "
                          "is the Ray head running there?") from None


@contextlib.contextmanager
def _local_ray() -> Iterator[dict[str, Any]]:
    """The `ray.init` arguments of a local Ray that leaves no file behind, for the span of the run.

    Ray keeps a session folder per start in $RAY_TMPDIR (default /tmp/ray) and never removes it: a
    private folder, short because Ray's socket paths must stay under 108 bytes, is used and removed.
    Ray turns token authentication on for a local cluster and, with no token in the environment,
    saves a new one to ~/.ray/auth_token: a token for this run only is put in the environment
    (RAY_AUTH_TOKEN; Ray's workers inherit it). A token or folder the user set is kept as is."""
    saved = os.environ.get("RAY_AUTH_TOKEN")
    mine = saved is None and "RAY_AUTH_TOKEN_PATH" not in os.environ and not (Path.home() / ".ray" / "auth_token").exists()
    folder = None if os.environ.get("RAY_TMPDIR") else tempfile.mkdtemp(prefix=f"ecosim-ray-{os.getpid()}-", dir="/tmp" if os.path.isdir("/tmp") else None)
    if mine:
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    try:
        yield {} if folder is None else {"_temp_dir": folder}
    finally:
        if mine:
            os.environ.pop("RAY_AUTH_TOKEN", None)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def run_ray(tasks: list[Task], jobs: int, address: str | None = None) -> Done:
    ray = import_ray()
    with contextlib.ExitStack() as stack:
        yield from _run_ray(ray, stack, tasks, jobs, address)


def _run_ray(ray: Any, stack: contextlib.ExitStack, tasks: list[Task], jobs: int, address: str | None) -> Done:
    started = False
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"logging_level": logging.ERROR, "log_to_driver": False}
        if address:
            kwargs["address"] = address
        else:
            kwargs.update(num_cpus=jobs, include_dashboard=False, object_store_memory=256 << 20,
                          **stack.enter_context(_local_ray()))
        try:
            ray.init(**kwargs)
        except Exception as e:  # noqa: BLE001  (connection refused, bad address, ...)
            raise EcoSimError(f"could not start or reach Ray ({str(e).splitlines()[0][:200]})") from None
        started = True
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(run_task)
        pending = {remote.remote(t): t for t in tasks}
        while pending:
            finished, _ = ray.wait(list(pending), num_returns=1)
            for ref in finished:
                task = pending.pop(ref)
                try:
                    yield task, ray.get(ref)
                except ray.exceptions.RayTaskError as e:
                    cause = getattr(e, "cause", None)
                    if isinstance(cause, EcoSimError):
                        raise cause from None
                    raise
    finally:
        if started:
            ray.shutdown()


def check_executor(executor: str, ray_address: str | None = None) -> None:
    """Refuse an executor that cannot run, before any output is written: unknown, Ray missing, a cluster
    address that does not answer."""
    if executor not in EXECUTORS:
        raise EcoSimError(f"--executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    if executor == "local" and ray_address:
        raise EcoSimError("--ray-address needs --executor ray")
    if executor == "ray":
        import_ray()
        if ray_address:
            check_ray_address(ray_address)


def run_tasks(tasks: list[Task], executor: str, jobs: int, ray_address: str | None = None) -> Done:
    check_executor(executor, ray_address)
    if executor == "local":
        return run_local(tasks, jobs)
    return run_ray(tasks, jobs, ray_address)
