"""What a policy may know of the target's routing before it verifies: an expert predictor.

A predictor maps each candidate node to a predicted expert set per MoE layer. It sees only what
the draft side has at selection time (the node's token, its parent's token and depth, the trace's
draft-side fields, the routing of positions already verified), never the node's own true experts,
except the `oracle` predictor, which exists to bound what a perfect predictor would gain.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from ecosim.trace.io import Trace


class ExpertPredictor(ABC):
    """Predicted expert sets for every node row of a trace."""

    name: str = "predictor"

    @abstractmethod
    def predict(self, trace: Trace) -> np.ndarray:
        """(rows, moe_layers, m) int16 predicted expert ids per node and layer; -1 pads unused slots."""

    def describe(self) -> str:
        return self.name


class OraclePredictor(ExpertPredictor):
    """The true routing from the trace: an upper bound on any real predictor."""

    name = "oracle"

    def predict(self, trace: Trace) -> np.ndarray:
        return trace.experts_3d()


class NoPredictor(ExpertPredictor):
    """Predicts nothing: every candidate costs 0, so `ecospec` reduces to confidence ranking."""

    name = "none"

    def predict(self, trace: Trace) -> np.ndarray:
        return np.full((len(trace.nodes["node"]), trace.model.num_moe_layers, 1), -1, dtype=np.int16)
