"""The microbenchmark design of `validate calibrate`: one frozen dataclass, built by keywords.

Its tree fields take their defaults from `ecosim.tree_config.TREE`, so a calibration times the
trees that `tracer record` and `validate run` grow by default.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from ecosim.errors import EcoSimError
from ecosim.tree_config import TREE, TreeShape


@dataclass(frozen=True, kw_only=True)
class CalibConfig:
    """The microbenchmark design; each field is a `validate calibrate` option (its help and default).

    Keyword-only: eleven fields of like types are too easy to misplace by position.
    """

    tokens: tuple[int, ...] = field(default=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64),
                                    metadata={"help": "Tokens per verify forward to benchmark, comma-separated."})
    levels: int = field(default=4, metadata={"help": "Expert-union levels per token count, spread over [top_k, "
                                                     "min(experts, tokens x top_k)]."})
    contexts: tuple[int, ...] = field(default=(48, 160), metadata={"help": "Context lengths (tokens in the KV cache) to "
                                                                           "benchmark at, comma-separated."})
    repeats: int = field(default=5, metadata={"help": "Runs of each case (the median is fitted)."})
    warmup: int = field(default=3, metadata={"help": "Untimed runs at each context's first use."})
    depth: int = field(default=TREE.depth, metadata={"help": TreeShape.help("depth")})
    topk: int = field(default=TREE.topk, metadata={"help": TreeShape.help("topk")})
    max_nodes: int = field(default=TREE.max_nodes, metadata={"help": TreeShape.help("max_nodes")})
    budget: int = field(default=16, metadata={"help": "Budget of the confidence selection timed with the draft."})
    overlap: str = field(default="sum", metadata={"help": "How the fit combines memory and compute time: sum or max."})
    seed: int = field(default=0, metadata={"help": "Seed of the random contexts, trees and expert sets."})

    @staticmethod
    def help(name: str) -> str:
        """The help text of one field, for a CLI option."""
        return next(f.metadata["help"] for f in fields(CalibConfig) if f.name == name)

    def check(self) -> None:
        """Bad values fail with one line before any model is loaded."""
        if not self.tokens or min(self.tokens) < 1:
            raise EcoSimError("--tokens: give positive token counts, e.g. 1,2,4,8,16,32")
        if not self.contexts or min(self.contexts) < 1:
            raise EcoSimError("--contexts: give positive context lengths, e.g. 48,160")
        if self.levels < 1 or self.repeats < 1:
            raise EcoSimError("--levels and --repeats must be at least 1")
        if self.overlap not in ("sum", "max"):
            raise EcoSimError(f"--overlap must be sum or max, got {self.overlap!r}")
