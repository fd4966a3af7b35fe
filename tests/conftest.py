"""Shared fixtures: small synthetic traces and the hand-built trace of the policy tests."""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings

from ecosim.catalog.models import ModelShape
from ecosim.synth import SynthConfig, synthesize

# database=None: no example database (ci is derandomised anyway); its storage folder: pytest_configure
settings.register_profile("ci", max_examples=200, deadline=None, derandomize=True, database=None)
settings.register_profile("dev", max_examples=50, deadline=None, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

ROOT = Path(__file__).resolve().parent.parent

# Everything the suite writes outside tmp_path goes under scratch folders removed at the end, so a run
# leaves nothing in /tmp or the checkout: pytest's own base folder (it keeps the last three runs
# otherwise), Ray's session folders, torch's compile cache and hypothesis's storage (else
# .hypothesis/ in the checkout). Subprocesses inherit the environment. Ray's folder is short and under
# /tmp like Ray's own default: its socket paths must stay under 108 bytes.
_SCRATCH: list[Path] = []


def pytest_configure(config: pytest.Config) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="ecosim-tests-"))
    ray = Path(tempfile.mkdtemp(prefix="ecosim-ray-", dir="/tmp" if os.path.isdir("/tmp") else None))
    _SCRATCH.extend([scratch, ray])
    os.environ.setdefault("RAY_TMPDIR", str(ray))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(scratch / "torchinductor"))
    os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(scratch / "hypothesis"))  # its constants cache
    if config.option.basetemp is None:
        config.option.basetemp = str(scratch / "pytest")


def pytest_unconfigure(config: pytest.Config) -> None:
    for path in _SCRATCH:
        shutil.rmtree(path, ignore_errors=True)


TINY = ModelShape(
    name="tiny-test", family="qwen3_moe", num_layers=3, moe_layers=(0, 1, 2), num_experts=8, top_k=2,
    num_shared_experts=0, hidden_size=64, moe_intermediate_size=32, vocab_size=500,
    expert_bytes=1_000_000, dense_bytes=3_000_000, kv_bytes_per_token=1024, bytes_per_param=2.0,
)


def set_path(m, path, value) -> None:
    """Set the nested key `path` (a sequence of keys) of JSON-like `m` to `value`; `KeyError` removes it."""
    for k in path[:-1]:
        m = m[k]
    if value is KeyError:
        del m[path[-1]]
    else:
        m[path[-1]] = value


def tiny_trace(seed: int = 0, **overrides) -> tuple[dict, dict, dict]:
    """(manifest, positions, nodes) of a small synthetic trace of the TINY shape."""
    cfg = dict(requests=2, positions=40, depth=4, topk=3, max_nodes=12, seed=seed)
    cfg.update(overrides)
    return synthesize(TINY, SynthConfig(**cfg))


def assert_same_trace(a: Path, b: Path) -> None:
    """Two trace directories hold the same trace: manifests (less `recorded_on`) and every column."""
    from ecosim.trace.io import read_trace

    ta, tb = read_trace(a), read_trace(b)
    strip = lambda m: {k: v for k, v in m.items() if k != "recorded_on"}  # noqa: E731 - dates, commands differ
    assert strip(ta.manifest) == strip(tb.manifest)
    for part in ("positions", "nodes"):
        da, db = getattr(ta, part), getattr(tb, part)
        assert da.keys() == db.keys()
        for k in da:
            assert np.array_equal(da[k], db[k], equal_nan=da[k].dtype.kind == "f"), f"{part}.{k} differs"


@pytest.fixture
def same_trace():
    """`assert_same_trace` for test directories below this one (they cannot import this conftest by name)."""
    return assert_same_trace


def hand_trace() -> tuple[dict, dict, dict]:
    """The 3-position trace whose every figure tests/test_policies.py works out by hand.

    2 MoE layers of 4 experts, top-2. Trees (node: parent, token, q, target_next, experts L0 | L1):
      pos 0  root 10 -> 11  [0,1] | [0,1]
             n1 <0  11  0.6 -> 12  [0,1] | [2,3]   accepted
             n2 <0  13  0.3 -> 5   [2,3] | [0,1]   rejected
             n3 <1  12  0.4 -> 7   [0,2] | [2,3]   accepted (depth 2)
      pos 1  root 11 -> 12  [0,1] | [2,3]
             n1 <0  12  0.9 -> 99  [0,2] | [2,3]   accepted
      pos 2  root 12 -> 7   [0,2] | [2,3]
             n1 <0  7   0.5 -> 8   [3,1] | [0,3]   accepted
    """
    model = ModelShape(
        name="hand", family="qwen3_moe", num_layers=2, moe_layers=(0, 1), num_experts=4, top_k=2,
        num_shared_experts=0, hidden_size=8, moe_intermediate_size=8, vocab_size=100,
        expert_bytes=1_000_000, dense_bytes=0,
    ).to_manifest()
    rows = [  # pos, node, parent, depth, token, q, target_next, experts
        (0, 0, -1, 0, 10, 1.0, 11, [0, 1, 0, 1]),
        (0, 1, 0, 1, 11, 0.6, 12, [0, 1, 2, 3]),
        (0, 2, 0, 1, 13, 0.3, 5, [2, 3, 0, 1]),
        (0, 3, 1, 2, 12, 0.4, 7, [0, 2, 2, 3]),
        (1, 0, -1, 0, 11, 1.0, 12, [0, 1, 2, 3]),
        (1, 1, 0, 1, 12, 0.9, 99, [0, 2, 2, 3]),
        (2, 0, -1, 0, 12, 1.0, 7, [0, 2, 2, 3]),
        (2, 1, 0, 1, 7, 0.5, 8, [3, 1, 0, 3]),
    ]
    nodes = {
        "request_id": np.zeros(len(rows), np.int32),
        "pos": np.array([r[0] for r in rows], np.int32),
        "node": np.array([r[1] for r in rows], np.int16),
        "parent": np.array([r[2] for r in rows], np.int16),
        "depth": np.array([r[3] for r in rows], np.int8),
        "token": np.array([r[4] for r in rows], np.int32),
        "draft_logprob": np.array([0.0 if r[1] == 0 else math.log(r[5]) for r in rows], np.float32),
        "target_next": np.array([r[6] for r in rows], np.int32),
        "target_logprob": np.array([np.nan if r[1] == 0 else -0.1 for r in rows], np.float32),
        "experts": np.array([r[7] for r in rows], np.int16),
    }
    positions = {
        "request_id": np.zeros(3, np.int32), "pos": np.arange(3, dtype=np.int32),
        "context_len": np.arange(3, dtype=np.int32) + 4, "n_nodes": np.array([4, 2, 2], np.int16),
    }
    manifest = {
        "synthetic": True, "model": model, "draft": {"name": "hand", "params": 0, "bytes": 0},
        "tree": {"depth": 2, "topk": 2, "max_nodes": 3}, "decoding": {"mode": "greedy"},
        "requests": [{"request_id": 0, "task": "qa", "prompt_ids": [1, 2, 3, 4], "positions": 3}],
        "recorded_on": {"by": "tests/conftest.py, by hand"},
    }
    return manifest, positions, nodes


@pytest.fixture
def write(tmp_path):
    """Write (manifest, positions, nodes) to a fresh trace directory and return its path."""
    from ecosim.trace.io import write_trace

    counter = iter(range(10**6))

    def _write(parts, name: str | None = None, validate: bool = True) -> Path:
        return write_trace(tmp_path / (name or f"t{next(counter)}"), *parts, validate=validate)

    return _write


def table_rows(out: str) -> list[list[str]]:
    """The rows of the first table a command printed, as cells, read by the header's column starts:
    piped, a wide table is drawn compact (a header, a rule of '─', rows; ecosim/cli/tables.py) and a
    narrow one keeps its boxes ('│' between cells). A blank name cell (a row continuing a group) is ''."""
    import re

    lines = out.splitlines()
    boxed = [x for x in lines if x.startswith("│")]
    if boxed:
        return [[c.strip() for c in x.strip("│").split("│")] for x in boxed[1:]]  # the first is the header
    rule = next(i for i, x in enumerate(lines) if x and set(x) == {"─"})
    header = lines[rule - 1]
    starts = [0, *(m.end() for m in re.finditer(r" {2,}", header))]
    rows = []
    for x in lines[rule + 1:]:
        if x.startswith(("used:", "verdict:")):
            break
        if x.strip():  # a blank line only separates one trace's rows from the next
            bounds = [*starts[1:], max(len(x), len(header)) + 1]
            rows.append([x[a:b].strip() for a, b in zip(starts, bounds)])
    return rows
