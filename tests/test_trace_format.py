"""The trace contract (TRACE_FORMAT.md v1): round trips, atomic writes, and every invariant refused.

Each mutation breaks one invariant of a valid trace; the reader must refuse it with one line that
names the file (and the row and column where there is one), never a traceback.
"""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import hand_trace, set_path, tiny_trace
from ecosim.cli import main
from ecosim.errors import EcoSimError
from ecosim.trace import check_trace, read_trace, write_trace
from ecosim.trace.checks import TraceError


def test_round_trip_keeps_every_column_and_the_fixed_size_lists(tmp_path):
    manifest, positions, nodes = tiny_trace(1, gates=True)
    trace = read_trace(write_trace(tmp_path / "t", manifest, positions, nodes))
    assert trace.manifest["synthetic"] is True
    for k, v in positions.items():
        assert np.array_equal(trace.positions[k], v)
    for k, v in nodes.items():
        assert np.array_equal(trace.nodes[k], v, equal_nan=True), k
    schema = pq.read_schema(tmp_path / "t" / "nodes.parquet")
    assert schema.field("experts").type == pa.list_(pa.int16(), 3 * 2)


@pytest.mark.parametrize("placement", ["hbm", "ep:2", "offload:4"])
def test_the_routing_is_held_in_one_byte_up_to_256_experts_and_no_figure_depends_on_it(tmp_path, placement):
    """Expert ids fit a byte where the model has at most 256 experts (the format has no pads): the
    routing is read in that type with the values stored; every policy's totals are the same with
    the routing held as int16."""
    import ecosim
    from ecosim.trace.arrays import Trace, routing_dtype

    assert routing_dtype(256) == np.uint8 and routing_dtype(257) == np.int16
    manifest, positions, nodes = tiny_trace(2)
    trace = read_trace(write_trace(tmp_path / "t", manifest, positions, nodes))
    assert trace.nodes["experts"].dtype == np.uint8 and np.array_equal(trace.nodes["experts"], nodes["experts"])
    wide = Trace(tmp_path / "t", trace.manifest, trace.positions, dict(trace.nodes))
    assert wide.nodes["experts"].dtype == np.uint8  # any Trace narrows what it is given ...
    wide.nodes["experts"] = nodes["experts"].astype(np.int16)  # ... so widen it after, by hand
    narrow_df, wide_df = (ecosim.replay([t], placement=placement, predictor="token") for t in (trace, wide))
    assert narrow_df.drop("trace").equals(wide_df.drop("trace"))


def test_an_unchecked_id_beyond_one_byte_is_kept_for_the_checker_to_name(tmp_path):
    """Reading without the checks (what `ecosim traces` does for the manifest) never wraps an id."""
    manifest, positions, nodes = tiny_trace(3)
    nodes["experts"][5, 1] = 300  # not an expert of an 8-expert model
    path = write_trace(tmp_path / "t", manifest, positions, nodes, validate=False)
    raw = read_trace(path, validate=False)
    assert raw.nodes["experts"].dtype == np.int16 and np.array_equal(raw.nodes["experts"], nodes["experts"])
    with pytest.raises(TraceError, match="experts"):
        read_trace(path)


def test_a_replay_read_keeps_no_gates_but_still_checks_them(tmp_path):
    """`gates=False` (every replay's read) drops the gate weights, four bytes per id, after checking them."""
    from ecosim.trace.read import iter_request_chunks

    manifest, positions, nodes = tiny_trace(4, gates=True)
    path = write_trace(tmp_path / "t", manifest, positions, nodes)
    whole, lean = read_trace(path), read_trace(path, gates=False)
    assert "gates" in whole.nodes and "gates" not in lean.nodes
    assert all(np.array_equal(whole.nodes[k], lean.nodes[k], equal_nan=True) for k in lean.nodes)
    assert all("gates" not in c.nodes for c in iter_request_chunks(path, 10_000, gates=False))
    nodes["gates"][7, 0] = np.nan
    bad = write_trace(tmp_path / "bad", manifest, positions, nodes, validate=False)
    with pytest.raises(TraceError, match="gate weights must be finite"):
        read_trace(bad, gates=False)


def test_lazy_scan_reads_the_nodes_without_loading_them(tmp_path):
    from ecosim.trace import scan_nodes

    write_trace(tmp_path / "t", *tiny_trace(2))
    assert scan_nodes(tmp_path / "t").select("node").collect().height == len(tiny_trace(2)[2]["node"])


def test_a_failed_write_leaves_the_previous_trace(tmp_path, monkeypatch):
    path = write_trace(tmp_path / "t", *hand_trace())
    before = {f.name: f.read_bytes() for f in path.iterdir()}

    def explode(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq, "write_table", explode)
    with pytest.raises(EcoSimError, match="previous trace is intact"):
        write_trace(path, *tiny_trace(3))
    assert {f.name: f.read_bytes() for f in path.iterdir()} == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_rewriting_replaces_the_trace_whole(tmp_path):
    path = write_trace(tmp_path / "t", *hand_trace())
    write_trace(path, *tiny_trace(4))
    assert read_trace(path).model.name == "tiny-test"


def test_refuses_to_overwrite_what_is_not_a_trace(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "precious.txt").write_text("keep me")
    with pytest.raises(EcoSimError, match="not a trace"):
        write_trace(tmp_path / "t", *hand_trace())
    assert (tmp_path / "t" / "precious.txt").read_text() == "keep me"


# ------------------------------------------------------------------------ mutations, one per invariant


def _set(table: str, column: str, index, value):
    def mutate(m, p, n):
        target = {"positions": p, "nodes": n}[table]
        a = np.array(target[column], copy=True)
        a[index] = value
        target[column] = a
    return mutate


def _manifest(path: list, value):
    def mutate(m, p, n):
        set_path(m, path, value)
    return mutate


def _expert(row: int, slot: int, value: int):
    def mutate(m, p, n):
        e = np.array(n["experts"], copy=True)
        e[row, slot] = value
        n["experts"] = e
    return mutate


# (name, mutation, text the error must contain). Rows refer to hand_trace.
MUTATIONS = [
    ("unknown version", _manifest(["version"], 4), "version 4 is not supported"),
    ("provenance not an object", _manifest(["provenance"], "real"), "column 'provenance'"),
    ("unknown provenance", _manifest(["provenance", "kind"], "measured"), "column 'provenance.kind'"),
    ("provenance contradicts synthetic", _manifest(["provenance", "kind"], "real"), "contradicts synthetic=True"),
    ("wrong format", _manifest(["format"], "other"), "'format'"),
    ("missing manifest key", _manifest(["tree"], KeyError), "column 'tree'"),
    ("missing model key", _manifest(["model", "top_k"], KeyError), "model.top_k"),
    ("top_k > experts", _manifest(["model", "top_k"], 9), "model.top_k"),
    ("moe layer out of range", _manifest(["model", "moe_layers"], [0, 5]), "model.moe_layers"),
    ("sampling", _manifest(["decoding", "mode"], "sample"), "greedy"),
    ("positions count", _manifest(["requests", 0, "positions"], 4), "positions"),
    ("prompt id out of vocab", _manifest(["requests", 0, "prompt_ids"], [1, 2, 3, 100]), "prompt_ids"),
    ("pos not dense", _set("positions", "pos", 2, 3), "column 'pos'"),
    ("context length", _set("positions", "context_len", 1, 9), "column 'context_len'"),
    ("n_nodes too many", _set("positions", "n_nodes", 2, 3), "n_nodes"),
    ("n_nodes zero", _set("positions", "n_nodes", 1, 0), "n_nodes"),
    ("two roots", _set("nodes", "parent", 1, -1), "column 'parent'"),
    ("root depth", _set("nodes", "depth", 0, 1), "column 'depth'"),
    ("parent after child", _set("nodes", "parent", 1, 3), "row 1 column 'parent'"),
    ("parent is self", _set("nodes", "parent", 3, 3), "row 3 column 'parent'"),
    ("depth skips", _set("nodes", "depth", 3, 3), "row 3 column 'depth'"),
    ("sibling tokens", _set("nodes", "token", 2, 11), "row 2 column 'token'"),
    ("token outside vocab", _set("nodes", "token", 5, 100), "row 5 column 'token'"),
    ("target_next negative", _set("nodes", "target_next", 5, -1), "row 5 column 'target_next'"),
    ("continuity", _set("nodes", "target_next", 0, 12), "continuity"),
    ("positive draft logprob", _set("nodes", "draft_logprob", 1, 0.5), "row 1 column 'draft_logprob'"),
    ("nan draft logprob", _set("nodes", "draft_logprob", 2, np.nan), "row 2 column 'draft_logprob'"),
    ("inf target logprob", _set("nodes", "target_logprob", 3, -np.inf), "row 3 column 'target_logprob'"),
    ("root draft logprob", _set("nodes", "draft_logprob", 4, -0.1), "row 4 column 'draft_logprob'"),
    ("expert out of range", _expert(6, 1, 4), "row 6 column 'experts'"),
    ("negative expert", _expert(2, 0, -1), "row 2 column 'experts'"),
    ("repeated expert in a layer", _expert(7, 3, 0), "row 7 column 'experts'"),
    ("node ids out of order", _set("nodes", "node", 3, 2), "column 'node'"),
    ("request id", _set("nodes", "request_id", 7, 1), "row 7 column 'request_id'"),
]


@pytest.mark.parametrize("name,mutate,expect", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_each_broken_invariant_is_one_clear_line(tmp_path, capsys, name, mutate, expect):
    original, p, n = hand_trace()
    m = copy.deepcopy(original)
    m.setdefault("provenance", {"kind": "synthetic" if m.get("synthetic") else "real", "source": ""})
    mutate(m, p, n)
    path = write_trace(tmp_path / "bad", original, p, n, validate=False)
    # The writer stamps format and version itself, so the manifest goes in as mutated, by hand.
    (path / "manifest.json").write_text(json.dumps({"format": "ecosim-trace", "version": 2, **m}))
    with pytest.raises(TraceError) as e:
        check_trace(path)
    msg = str(e.value)
    assert expect in msg and "\n" not in msg and str(path) in msg
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ecosim: error:")


def test_the_hand_trace_itself_is_valid(tmp_path):
    m = check_trace(write_trace(tmp_path / "t", *hand_trace()))
    assert m["version"] == 2 and m["provenance"]["kind"] == "synthetic"


def test_a_version_1_trace_still_reads_and_its_provenance_comes_from_synthetic(tmp_path):
    path = write_trace(tmp_path / "t", *hand_trace())
    m = json.loads((path / "manifest.json").read_text())
    del m["provenance"]
    m["model"]["dense_bytes"] = 1e6  # a recorded trace's model reads more than its experts (the gate says so)
    for synthetic, kind in ((False, "real"), (True, "synthetic")):
        (path / "manifest.json").write_text(json.dumps({**m, "version": 1, "synthetic": synthetic}))
        t = read_trace(path)
        assert t.manifest["version"] == 1 and t.provenance == kind


# ------------------------------------------------------------------------ generated valid and broken traces


@given(st.integers(0, 10**6), st.integers(1, 3), st.integers(1, 25), st.integers(1, 5), st.integers(1, 4),
       st.integers(1, 30), st.booleans())
def test_generated_valid_traces_pass(tmp_path_factory, seed, requests, positions, depth, topk, max_nodes, gates):
    parts = tiny_trace(seed, requests=requests, positions=positions, depth=depth, topk=topk, max_nodes=max_nodes, gates=gates)
    path = write_trace(tmp_path_factory.mktemp("v") / "t", *parts)
    assert check_trace(path)["synthetic"] is True


COLUMNS = ["request_id", "pos", "node", "parent", "depth", "token", "draft_logprob", "target_next", "target_logprob", "experts"]


@settings(max_examples=1000)
@given(st.integers(0, 10**6), st.sampled_from(COLUMNS), st.integers(0, 10**6), st.integers(-(2**15), 2**15 - 1))
def test_generated_corruptions_are_refused_or_harmless(tmp_path_factory, seed, column, where, value):
    """Overwrite one cell with an arbitrary value: either the trace is still valid by every
    invariant (recheck independently) or it is refused in one line; never a crash."""
    m, p, n = tiny_trace(seed % 1000, requests=2, positions=6, depth=3, topk=2, max_nodes=5)
    a = np.array(n[column], copy=True)
    flat = a.reshape(-1)
    i = where % len(flat)
    if flat[i] == value or (column in ("node", "depth") and not -128 <= value <= 127):
        return
    flat[i] = value
    n[column] = a
    path = tmp_path_factory.mktemp("c") / "t"
    path.mkdir()
    try:
        write_trace(path, m, p, n, validate=False)
    except EcoSimError:
        return
    try:
        check_trace(path)
    except TraceError as e:
        assert "\n" not in str(e) and "nodes.parquet" in str(e)
        return
    # Accepted: then the value must satisfy the contract (e.g. a draft log-prob made more negative).
    assert column in ("draft_logprob", "target_logprob", "experts", "token", "target_next"), (column, value)


@settings(max_examples=600)
@given(st.integers(0, 10**6), st.sampled_from(["positions.parquet", "nodes.parquet", "manifest.json"]),
       st.sampled_from(["truncate", "garbage", "empty", "delete"]), st.integers(0, 10**6))
def test_damaged_files_are_one_line_errors(tmp_path_factory, seed, name, how, cut):
    path = write_trace(tmp_path_factory.mktemp("d") / "t", *tiny_trace(seed % 50, positions=5))
    f = path / name
    data = f.read_bytes()
    if how == "truncate":
        f.write_bytes(data[: cut % max(1, len(data) - 1)])
    elif how == "garbage":
        rng = np.random.default_rng(cut)
        f.write_bytes(rng.integers(0, 256, len(data), dtype=np.uint8).tobytes())
    elif how == "empty":
        f.write_bytes(b"")
    else:
        f.unlink()
    with pytest.raises(EcoSimError) as e:
        read_trace(path)
    assert "\n" not in str(e.value) and name in str(e.value)


@pytest.mark.parametrize("column,dtype", [("pos", pa.int64()), ("token", pa.float32()), ("depth", pa.int32())])
def test_wrong_dtypes_are_refused(tmp_path, column, dtype):
    path = write_trace(tmp_path / "t", *hand_trace())
    name = "positions.parquet" if column == "pos" else "nodes.parquet"
    table = pq.read_table(path / name)
    i = table.schema.get_field_index(column)
    table = table.set_column(i, pa.field(column, dtype), table.column(column).cast(dtype))
    pq.write_table(table, path / name)
    with pytest.raises(TraceError, match=f"column '{column}': has type"):
        check_trace(path)


def test_missing_columns_are_refused(tmp_path):
    path = write_trace(tmp_path / "t", *hand_trace())
    pq.write_table(pq.read_table(path / "nodes.parquet").drop(["target_next"]), path / "nodes.parquet")
    with pytest.raises(TraceError, match="column 'target_next': missing column"):
        check_trace(path)


def test_nan_is_allowed_only_for_the_roots_target_logprob(tmp_path):
    m, p, n = hand_trace()
    assert math.isnan(n["target_logprob"][0])
    check_trace(write_trace(tmp_path / "t", m, p, n))
