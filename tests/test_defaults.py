"""One default per knob for every command: the predictor (a real one) and the tree shape."""

from __future__ import annotations

import importlib.util

import pytest
import typer.main

from ecosim.cli import app
from ecosim.policies.knobs import PREDICTOR
from ecosim.synth import SynthConfig
from ecosim.tree_config import TREE

HAS_TORCH = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("transformers") is not None


def _defaults(typer_app, *path: str) -> dict[str, object]:
    cmd = typer.main.get_command(typer_app)
    for name in path:
        cmd = cmd.commands[name]
    return {p.name: p.default for p in cmd.params}


def test_the_predictor_default_is_the_same_real_predictor_everywhere():
    import ecosim.cli.replay, ecosim.cli.sweep  # noqa: F401

    assert PREDICTOR.default not in ("oracle", "none")  # bounds, not predictors a system can run
    assert _defaults(app, "replay")["predictor"] == PREDICTOR.default
    assert list(_defaults(app, "sweep")["predictor"]) == [PREDICTOR.default]  # an axis: a list of one
    if HAS_TORCH:
        from validate.choice import from_flags

        assert from_flags("ecospec", {}).winner.predictor == PREDICTOR.default


def test_the_tree_shape_is_defined_once():
    import ecosim.cli.traces  # noqa: F401

    assert (TREE.depth, TREE.topk, TREE.max_nodes) == (6, 4, 32)  # the committed traces' shape
    want = {"depth": TREE.depth, "topk": TREE.topk, "max_nodes": TREE.max_nodes}
    synth = _defaults(app, "synth")  # None: TREE's value, or the --draft's own tree (ecosim/cli/traces.py)
    assert all(synth[k] in (None, v) for k, v in want.items())
    assert (SynthConfig().depth, SynthConfig().topk, SynthConfig().max_nodes) == tuple(want.values())
    if not HAS_TORCH:
        pytest.skip("tracer and validate need torch")
    from tracer.cli import app as tracer_app
    from tracer.record import RecordConfig
    from validate.calibrate import CalibConfig
    from validate.cli import app as validate_app
    from validate.measure import RunConfig

    for d in (_defaults(tracer_app, "record"), _defaults(validate_app, "calibrate"), _defaults(validate_app, "run")):
        assert {k: d[k] for k in want} == want
    for cls in (RecordConfig, CalibConfig, RunConfig):
        fields = cls.__dataclass_fields__
        assert {k: fields[k].default for k in want} == want, cls.__name__
