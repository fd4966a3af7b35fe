"""What the expert-predictor tests share: a tiny 16-expert MoE shape, three small synthetic traces of it (routing a
function of the token, uniform random routing, and the default mix), the context model's quick training options,
and a runner of the `ecosim` CLI in-process.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ecosim.catalog.models import get_model
from ecosim.cli import main
from ecosim.synth import SynthConfig, write_synthetic


SHAPE = replace(get_model("mixtral-8x7b"), name="tiny-moe", num_layers=4, moe_layers=(0, 1, 2, 3), num_experts=16, top_k=2)
SMALL = dict(requests=6, positions=40, depth=4, topk=3, max_nodes=12, active_vocab=50)
CONTEXT = dict(dim=4, epochs=2, batch=256)


def make_traces(root: Path) -> dict[str, Path]:
    """The three traces under `root`, by name (each test module makes them once, in its `traces` fixture)."""
    cfgs = {
        "token": SynthConfig(**SMALL, token_affinity=1.0, parent_affinity=0.0, seed=3),
        "uniform": SynthConfig(**SMALL, skew=0.0, token_affinity=0.0, parent_affinity=0.0, seed=4),
        "mixed": SynthConfig(**SMALL, seed=5),
    }
    return {name: write_synthetic(root / name, SHAPE, cfg) for name, cfg in cfgs.items()}


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err
