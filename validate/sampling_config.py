"""What `validate sampling-check` takes: one frozen dataclass whose fields are its options (help and default).

Kept apart from validate/sampling_check.py so that the command line reads it without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from ecosim.errors import EcoSimError
from ecosim.tree_config import TreeShape


@dataclass(frozen=True, kw_only=True)
class SamplingCheck:
    """What `validate sampling-check` takes; each field is an option (its help and default)."""

    samples: int = field(default=400, metadata={"help": "Samples per prompt and arm (plain, speculative)."})
    tokens: int = field(default=3, metadata={"help": "Generated tokens per sample: the histogram is of these sequences."})
    temperature: float = field(default=0.7, metadata={"help": "Sampling temperature (above 0)."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass."})
    top_k: int = field(default=0, metadata={"help": "Sample among the K most probable tokens (0: all)."})
    seed: int = field(default=0, metadata={"help": "First seed: plain samples take seed + i, speculative ones "
                                                   "seed + samples + i (independent draws)."})
    alpha: float = field(default=0.001, metadata={"help": "Fail (exit 1) when the chi-square p-value is below this."})
    min_count: int = field(default=5, metadata={"help": "Sequences seen fewer times over both arms are pooled into one "
                                                        "category (the chi-square approximation wants about 5)."})
    tree: TreeShape = field(default_factory=lambda: TreeShape(depth=4, topk=4, max_nodes=16),
                            metadata={"help": "The speculative arm's tree."})

    @staticmethod
    def help(name: str) -> str:
        return next(f.metadata["help"] for f in fields(SamplingCheck) if f.name == name)

    def sampler(self, seed: int) -> Any:
        """The tracer's Sampler with this temperature, top-p and top-k and the given seed (torch loads here)."""
        from tracer.sampler import Sampler

        return Sampler(self.temperature, self.top_p, self.top_k, seed)

    def check(self) -> None:
        if not 0.0 < self.temperature <= 100.0:
            raise EcoSimError(f"--temperature {self.temperature}: must be in (0, 100] (at 0 there is nothing to sample)")
        if not 0.0 < self.top_p <= 1.0 or self.top_k < 0:
            raise EcoSimError(f"--top-p {self.top_p} must be in (0, 1] and --sample-top-k {self.top_k} at least 0")
        if self.samples < 1 or self.tokens < 1 or self.min_count < 1:
            raise EcoSimError("--samples, --tokens and --min-count must be at least 1")
        if not 0.0 < self.alpha < 1.0:
            raise EcoSimError(f"--alpha {self.alpha}: must be in (0, 1)")
