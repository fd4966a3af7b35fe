"""Replay in pieces (--max-memory) gives exactly the in-memory replay, and still checks the trace."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import tiny_trace
from ecosim.catalog.devices import get_device
from ecosim.cost import CostConfig
from ecosim.errors import EcoSimError
from ecosim.placements import parse_placement
from ecosim.policies import PolicySpec
from ecosim.replay import TraceReplay
from ecosim.simulate import cost_model
from ecosim.stream import WORKING_SET, run_streamed
from ecosim.trace.io import iter_request_chunks, read_trace, row_bytes, write_trace
from ecosim.trace.checks import TraceError


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory):
    return write_trace(tmp_path_factory.mktemp("s") / "t", *tiny_trace(21, requests=7, positions=25))


@pytest.mark.parametrize("placement", ["hbm", "ep:4", "offload:3"])
@pytest.mark.parametrize("spec", [PolicySpec("ar"), PolicySpec("confidence", 6), PolicySpec("ecospec", 6, 0.4, "oracle"), PolicySpec("oracle")],
                         ids=lambda s: s.name)
def test_pieces_equal_the_whole(trace_path, placement, spec):
    whole = TraceReplay(read_trace(trace_path))
    cost = cost_model(whole.trace, get_device("h200"), parse_placement(placement), CostConfig())
    per_row = row_bytes(whole.trace.manifest, gates=False) * WORKING_SET
    biggest = max(int(whole.trace.positions["n_nodes"][whole.trace.positions["request_id"] == r].sum()) for r in range(7))
    streamed = run_streamed(trace_path, spec, cost, max_memory=biggest * per_row)
    assert streamed == whole.run(spec, cost)


def test_chunks_hold_whole_requests_within_the_budget(trace_path):
    chunks = list(iter_request_chunks(trace_path, max_rows=700))
    assert len(chunks) > 1
    seen = np.concatenate([c.positions["request_id"] for c in chunks])
    assert np.array_equal(seen, read_trace(trace_path).positions["request_id"])
    for c in chunks:
        assert len(c.nodes["node"]) <= 700
        assert {r["request_id"] for r in c.manifest["requests"]} == set(c.positions["request_id"].tolist())


def test_a_request_larger_than_the_budget_is_one_clear_error(trace_path):
    with pytest.raises(EcoSimError, match="alone has .* node rows"):
        list(iter_request_chunks(trace_path, max_rows=10))


def test_streaming_still_checks_every_invariant(tmp_path):
    m, p, n = tiny_trace(22, requests=3, positions=10)
    n["experts"] = n["experts"].copy()
    n["experts"][-1, 0] = 99
    path = write_trace(tmp_path / "bad", m, p, n, validate=False)
    with pytest.raises(TraceError, match="column 'experts'"):
        list(iter_request_chunks(path, max_rows=10_000))
