"""The shape of a draft's candidate tree, defined once for every command that grows one.

`ecosim synth`, `tracer record`, `validate calibrate` and `validate run` all take these three
options with these defaults (`TREE`), so a synthetic trace, a recording and a validation of the
same defaults describe the same trees. The defaults are those of the committed traces in
traces/ (depth 6, top-4, 32 candidates: `tracer record ... --depth 6 --topk 4 --max-nodes 32`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields


@dataclass(frozen=True)
class TreeShape:
    """EAGLE-2-style tree: expand the `topk` best nodes of each depth by `topk` children, `depth`
    times, then keep the `max_nodes` best by cumulative draft log-prob."""

    depth: int = field(default=6, metadata={"help": "Draft steps per tree = its maximum depth (SGLang: speculative_num_steps)."})
    topk: int = field(default=4, metadata={"help": "Children per expanded node and nodes expanded per depth (SGLang: eagle_topk)."})
    max_nodes: int = field(default=32, metadata={"help": "Candidates kept per tree besides the root, the best by cumulative draft "
                                                         "log-prob (EAGLE-2: total_token - 1)."})

    @staticmethod
    def help(name: str) -> str:
        """The help text of one field, for a CLI option."""
        return next(f.metadata["help"] for f in fields(TreeShape) if f.name == name)

    def to_dict(self) -> dict[str, int]:
        return {"depth": self.depth, "topk": self.topk, "max_nodes": self.max_nodes}


TREE = TreeShape()
