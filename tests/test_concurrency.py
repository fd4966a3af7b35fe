"""Closed-loop clients (`--concurrency N`, `--arrivals concurrency:N`): N clients each send their next
request when their last one ends, as users benchmark a server, and the run reports each request's
tokens/s beside the inter-token latency. One client is the sequential run and as many clients as
requests is every request sent at once, bit for bit; in between, never more than N are in flight."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from conftest import tiny_trace
from ecosim.catalog.devices import get_device
from ecosim.cli import main
from ecosim.cost import CostConfig
from ecosim.des import DesConfig, des_run
from ecosim.placements import parse_placement
from ecosim.policies import PolicySpec
from ecosim.replay import TraceReplay
from ecosim.simulate import cost_model
from ecosim.trace.io import read_trace

REQUESTS = 5


@pytest.fixture(scope="module")
def replay(tmp_path_factory) -> TraceReplay:
    from ecosim.trace.io import write_trace

    path = write_trace(tmp_path_factory.mktemp("conc") / "t", *tiny_trace(12, requests=REQUESTS, positions=14))
    return TraceReplay(read_trace(path))


def _cost(replay: TraceReplay, placement: str = "hbm"):
    return cost_model(replay.trace, get_device("h200"), parse_placement(placement), CostConfig())


@pytest.mark.parametrize("name", ["ar", "confidence"])
def test_one_client_is_the_sequential_run(replay, name):
    cost = _cost(replay)
    one = des_run(replay, PolicySpec(name), cost, DesConfig("concurrency:1"))
    seq = des_run(replay, PolicySpec(name), cost, DesConfig())
    assert one.row == seq.row and one.latencies_s == seq.latencies_s and one.inter_token_s == seq.inter_token_s


@pytest.mark.parametrize("placement", ["hbm", "ep:2"])
def test_a_client_per_request_is_every_request_sent_at_once(replay, placement):
    cost = _cost(replay, placement)
    spec = PolicySpec("confidence", 6)
    for n in (REQUESTS, REQUESTS + 3):  # more clients than requests: the extra ones send nothing
        closed = des_run(replay, spec, cost, DesConfig(f"concurrency:{n}", max_batch=REQUESTS))
        together = des_run(replay, spec, cost, DesConfig("together", max_batch=REQUESTS))
        assert closed.row == together.row and closed.latencies_s == together.latencies_s


@pytest.mark.parametrize("n", [2, 3])
def test_never_more_than_n_requests_in_flight(replay, n):
    cost = _cost(replay)
    r = des_run(replay, PolicySpec("confidence", 6), cost, DesConfig(f"concurrency:{n}", max_batch=8, timeline=True))
    batch = [int(re.fullmatch(r"step x(\d+)", e["name"]).group(1)) for e in r.events if str(e["name"]).startswith("step x")]
    assert max(batch) == n  # the server would batch 8; only n are ever active
    # fewer clients than requests: each waits for a request to end, so a request takes longer than
    # it does alone, and the whole run takes longer than with every request sent at once
    at_once = des_run(replay, PolicySpec("confidence", 6), cost, DesConfig("together", max_batch=8))
    assert r.makespan_s > at_once.makespan_s


def test_per_request_tokens_per_second_by_hand(replay):
    cost = _cost(replay)
    spec = PolicySpec("confidence", 6)
    r = des_run(replay, spec, cost, DesConfig("concurrency:2", max_batch=2))
    steps = replay.steps(spec)
    tokens = [int(steps.tokens[steps.request == q].sum()) for q in [int(x["request_id"]) for x in replay.trace.manifest["requests"]]]
    assert r.request_tokens == tokens and sum(tokens) == r.row.tokens
    speeds = np.array(tokens) / np.array(r.latencies_s)
    got = r.serving()["request_tokens_per_s"]
    assert got == {"p50": pytest.approx(np.percentile(speeds, 50)), "p10": pytest.approx(np.percentile(speeds, 10)),
                   "p1": pytest.approx(np.percentile(speeds, 1))}
    alone = des_run(replay, spec, cost, DesConfig()).serving()["request_tokens_per_s"]
    assert got["p50"] < alone["p50"]  # sharing the server slows each request down


def test_replay_concurrency_reports_per_request_speed(replay, capsys):
    path = str(replay.trace.path)
    assert main(["replay", path, "--policy", "ar,confidence", "--concurrency", "2"]) == 0
    out = capsys.readouterr().out
    assert "engine des" in out and out.count("per request p50/p10/p1") == 2
    assert main(["replay", path, "--policy", "confidence", "--concurrency", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["engine"] == "des"
    [row] = doc["rows"]
    assert 0 < row["serving"]["request_tokens_per_s"]["p1"] <= row["serving"]["request_tokens_per_s"]["p50"]


def _tune(paths: list[str], *more: str) -> dict:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["tune", *paths, "--json", *more]) == 0
    return json.loads(out.getvalue())


def test_tune_for_one_client_is_tune_at_batch_one(replay):
    path = str(replay.trace.path)
    alone, one = _tune([path]), _tune([path], "--concurrency", "1")
    assert one["concurrency"] == 1 and alone["concurrency"] == 1
    assert (one["best"], one["setting"], one["flags"]) == (alone["best"], alone["setting"], alone["flags"])
    assert one["best_ms_per_token"] == pytest.approx(alone["best_ms_per_token"], rel=1e-9)
    assert one["ar_ms_per_token"] == pytest.approx(alone["ar_ms_per_token"], rel=1e-9)
    assert "serving" in one and "serving" not in alone


def test_tune_under_concurrency_serves_every_candidate_with_its_batch(replay):
    path = str(replay.trace.path)
    one, four = _tune([path], "--concurrency", "1"), _tune([path], "--concurrency", "4")
    assert four["concurrency"] == 4
    # four requests in flight share each forward's reads: plain decoding costs less per token of the run
    assert four["ar_ms_per_token"] < one["ar_ms_per_token"]
    best = four["serving"]["best"][replay.trace.name]["request_tokens_per_s"]
    assert 0 < best["p1"] <= best["p10"] <= best["p50"]
    plain = (four["serving"].get("ar") or four["serving"]["best"])[replay.trace.name]
    assert plain["forwards"] < one["serving"]["best" if not one["speculation_pays"] else "ar"][replay.trace.name]["forwards"]
