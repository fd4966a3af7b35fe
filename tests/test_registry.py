"""The policy registry: a policy with a knob nobody else has, added here and nowhere else, runs
through the fast engine, the sweep grid (ids, columns, results, winner) and `PolicySpec`.

The policy is `shallow`: every node at depth <= `max_depth` (ancestor-closed: a node's parent is
shallower). At depth 0 it verifies what `ar` verifies (the root alone) but pays for a draft.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from conftest import tiny_trace
from ecosim.catalog.devices import get_device
from ecosim.cost import CostConfig
from ecosim.errors import EcoSimError
from ecosim.placements import parse_placement
from ecosim.policies import Knob, Policy, PolicySpec, registry
from ecosim.replay import TraceReplay
from ecosim.simulate import cost_model
from ecosim.sweep import grid as g
from ecosim.sweep.runner import run_sweep
from ecosim.trace.io import read_trace


def _depth(d: int) -> int:
    if d < 0:
        raise EcoSimError(f"max_depth must be >= 0, got {d}")
    return d


MAX_DEPTH = Knob("max_depth", int, 1, "Deepest level verified.", check=_depth, short="d<=")
SHALLOW = Policy("shallow", "Every node down to max_depth.", knobs=(MAX_DEPTH,),
                 select=lambda ctx, knobs: ctx.trees.depth <= knobs["max_depth"])


@pytest.fixture
def shallow():
    registry.register(SHALLOW)
    yield SHALLOW
    registry.unregister(SHALLOW.name)


def test_a_registered_policy_runs_in_the_fast_engine(write, shallow):
    r = TraceReplay(read_trace(write(tiny_trace(3, requests=3, positions=30))))
    t = r.trees
    assert np.array_equal(r.selection(PolicySpec("shallow", max_depth=2)), t.depth <= 2)
    cost = cost_model(r.trace, get_device("h200"), parse_placement("offload:3"), CostConfig(draft_time_s=1e-3))
    ar = r.run(PolicySpec("ar"), cost)
    flat = r.run(PolicySpec("shallow", max_depth=0), cost)
    assert (flat.tokens, flat.steps, flat.expert_loads, flat.pcie_bytes) == (ar.tokens, ar.steps, ar.expert_loads, ar.pcie_bytes)
    assert flat.time_s == pytest.approx(ar.time_s + ar.steps * 1e-3, rel=1e-12)  # the same steps, plus a draft each
    deep = r.run(PolicySpec("shallow", max_depth=9), cost)
    assert deep.steps < ar.steps and deep.tokens == ar.tokens
    assert PolicySpec("shallow", max_depth=3).label() == "shallow d<=3"


def test_knobs_are_checked_and_other_policies_ignore_them(shallow):
    with pytest.raises(EcoSimError, match="max_depth must be >= 0"):
        PolicySpec("shallow", max_depth=-1)
    with pytest.raises(EcoSimError, match="unknown knob"):
        PolicySpec("shallow", depth=2)
    assert PolicySpec("confidence", 8, max_depth=3) == PolicySpec("confidence", 8)
    assert PolicySpec("confidence", 8).max_depth is None and PolicySpec("shallow").max_depth == 1
    assert g.parse_axis("max_depth", "0:4:2") == [0, 2, 4]
    with pytest.raises(EcoSimError, match="--max-depth"):
        g.parse_axis("max_depth", "-1")


def test_registering_a_policy_changes_no_other_configuration_id(write, tmp_path):
    ref = g.TraceRef(str(tmp_path), "f" * 32)
    knobs = {"budget": [4, 8], "lam": [0.5], "predictor": ["oracle"], "score": ["difference"]}
    grid = g.Grid(["confidence", "ecospec"], knobs, ["h200"], [None], ["hbm"])
    before = [c.id for c in grid.configs([ref])]
    registry.register(SHALLOW)
    try:
        assert [c.id for c in grid.configs([ref])] == before
    finally:
        registry.unregister(SHALLOW.name)


def test_a_registered_policy_sweeps_with_its_own_column(write, tmp_path, shallow):
    trace = write(tiny_trace(5, requests=2, positions=25))
    grid = g.Grid(["confidence", "shallow"], {"budget": [4], "max_depth": [0, 2]}, ["h200"], [None], ["hbm", "offload:3"])
    assert [s.label(full=True) for s in grid.selections()] == ["ar", "confidence b=4", "shallow d<=0", "shallow d<=2", "oracle"]
    out = run_sweep(grid, [trace], tmp_path / "sweep", jobs=1)
    df = out.results
    assert df.schema["max_depth"] == pl.Int64
    assert df.filter(pl.col("policy") == "shallow")["max_depth"].to_list() == [0, 2, 0, 2]
    assert df.filter(pl.col("policy") != "shallow")["max_depth"].null_count() == 6
    r = TraceReplay(read_trace(trace))
    for rec in df.filter(pl.col("policy") == "shallow").iter_rows(named=True):
        cost = cost_model(r.trace, get_device("h200"), parse_placement(rec["placement"]), CostConfig())
        assert rec["time_s"] == r.run(PolicySpec("shallow", max_depth=rec["max_depth"]), cost).time_s
    for w in out.winner["winners"]:
        assert "max_depth" in w["config"]
    again = run_sweep(grid, [trace], tmp_path / "sweep", jobs=1)  # resumed: every configuration found done
    assert again.computed == 0 and again.results.equals(df)


def test_lambda_auto_is_a_spelling_of_the_self_tuning_policy():
    """`--lambda auto` is a word of ecospec's lambda knob, naming the policy that runs instead; the
    knobs ecospec-auto lacks (budget, score) are dropped as any policy drops knobs it has no use for."""
    auto = PolicySpec("ecospec-auto", predictor="oracle")
    assert PolicySpec("ecospec", 8, "auto", "oracle") == auto
    assert PolicySpec("ecospec", lam=" AUTO ", predictor="oracle", score="ratio") == auto
    assert PolicySpec("confidence", 8, lam="auto") == PolicySpec("confidence", 8)  # not its knob: dropped
    assert PolicySpec("ecospec", lam="0.25").lam == 0.25  # text of a number is still a number
    with pytest.raises(EcoSimError, match="lambda must be float or 'auto'"):
        PolicySpec("ecospec", lam="often")
    lam = registry.knob_by_key("lambda")
    assert lam.metavar == "FLOAT|auto" and lam.policy_for("auto") == "ecospec-auto" and lam.policy_for(0.5) is None
    assert g.parse_axis("lambda", "0:0.2:0.1,auto,0.1") == [0.0, 0.1, 0.2, "auto"]
    with pytest.raises(EcoSimError, match="--lambda"):
        g.parse_axis("lambda", "0.1,automatic")
    # a sweep grid with auto among the lambdas runs ecospec-auto once, whatever the budgets
    grid = g.Grid(["ecospec"], {"budget": [4, 8], "lam": [0.5, "auto"], "predictor": ["oracle"], "score": ["difference"]},
                  ["h200"], [None], ["hbm"])
    names = [s.name for s in grid.selections()]
    assert names.count("ecospec-auto") == 1 and names.count("ecospec") == 2


def test_a_word_names_another_policy():
    gamma = Knob("gamma", float, 0.5, "x", words=(("auto", "selfish"),))
    bad = Policy("selfish", "Names itself.", knobs=(gamma,), select=lambda ctx, knobs: ctx.trees.depth == 0)
    with pytest.raises(ValueError, match="names selfish"):
        registry.register(bad)
    assert "selfish" not in registry.names()


def test_no_module_outside_the_registry_compares_a_policy_name():
    """Only ecosim/policies knows a policy by its name: elsewhere a comparison with a policy's name
    (`spec.name == "ecospec"`) is a branch the registry cannot see."""
    import re
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    names = "|".join(re.escape(n) for n in registry.names())
    compare = re.compile(rf"""(==|!=)\s*["']({names})["']|["']({names})["']\s*(==|!=)""")
    member = re.compile(rf"""\bin\s*[(\[{{]\s*["']({names})["']""")  # `x in ("ar", ...)` (a `for` line is a loop)
    assert compare.search('if spec.name == "ecospec":') and member.search("if p.name in ('ar', 'oracle'):")
    hits = []
    for folder in ("ecosim", "bench"):
        for path in (root / folder).rglob("*.py"):
            if path.parent.name == "policies":
                continue
            for i, line in enumerate(path.read_text().splitlines(), 1):
                if compare.search(line) or (folder == "ecosim" and member.search(line) and not line.lstrip().startswith("for ")):
                    hits.append(f"{path.relative_to(root)}:{i}: {line.strip()}")
    assert not hits, "\n".join(hits)
