"""The target's next token at temperature T, drawn so that a recorded trace replays exactly.

At T > 0 the trace follows one sampled continuation. The rule verifying it is target-only
(ecosim/sampling.py): at each node of a step draw y ~ p and continue into the child whose token is y. For that
to replay from recorded trees, a node on the continuation must draw the very token the continuation drew. Two
things make it so:

- **Common random numbers.** The uniform that draws the token filling generated index n of request r is
  u(seed, r, n), whatever forward computed the distribution: the root at position n - 1 and a node at depth d of
  the tree at position n - 1 - d share it. Same sequence, same distribution, same u: same token.
- **Inverse CDF over a fixed order.** Tokens are ordered by descending probability, ties by id, and y is the first
  whose cumulative probability exceeds u: a tiny numerical difference between a tree forward and a plain decode
  moves a boundary by about that difference, so a draw flips only when u falls within it (the tracer's checks
  recompute nodes and would say so).

The distribution is softmax(logits / T), restricted to the `top_k` most probable tokens (0: all) and then to the
smallest set whose mass reaches `top_p`, renormalised: the order vLLM and SGLang apply them. T = 0 is the argmax.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class Sampler:
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def problem(self) -> str | None:
        """Why these settings cannot sample, in the CLI's words (None: they can); each command raises it as its error."""
        if not (0.0 <= self.temperature <= 100.0) or not (0.0 < self.top_p <= 1.0) or self.top_k < 0 or self.seed < 0:
            return (f"--temperature {self.temperature} in [0, 100], --top-p {self.top_p} in (0, 1], "
                    f"--sample-top-k {self.top_k} and --seed {self.seed} at least 0")
        if self.greedy and (self.top_p != 1.0 or self.top_k):
            return "--top-p and --sample-top-k apply to sampling: give --temperature above 0"
        return None

    def decoding(self) -> dict[str, object]:
        """The manifest's `decoding` object."""
        if self.greedy:
            return {"mode": "greedy"}
        return {"mode": "sample", "temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k,
                "seed": self.seed, "verify": "target-only"}

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """(n, vocab) float64 distributions after temperature, top-k and top-p."""
        p = torch.softmax(logits.double() / self.temperature, dim=-1)
        if self.top_k and self.top_k < p.shape[-1]:
            kth = torch.topk(p, self.top_k, dim=-1).values[:, -1:]
            p = torch.where(p >= kth, p, torch.zeros_like(p))
        if self.top_p < 1.0:
            sp, idx = torch.sort(p, dim=-1, descending=True, stable=True)
            keep = (torch.cumsum(sp, dim=-1) - sp) < self.top_p  # the smallest prefix reaching top_p
            p = torch.zeros_like(p).scatter(-1, idx, sp * keep)
        return p / p.sum(dim=-1, keepdim=True)

    def uniform(self, request: int, index: int) -> float:
        """u(seed, request, generated index): the one random number that index is drawn with."""
        return float(np.random.default_rng([self.seed, request, index]).random())

    def draw(self, logits: torch.Tensor, request: int, indices: np.ndarray) -> np.ndarray:
        """The token each row of `logits` draws for the generated index it fills (int64)."""
        if self.greedy:
            return logits.argmax(dim=-1).cpu().numpy().astype(np.int64)
        p = self.probs(logits)
        sp, idx = torch.sort(p, dim=-1, descending=True, stable=True)
        cdf = torch.cumsum(sp, dim=-1).cpu().numpy()
        idx = idx.cpu().numpy()
        out = np.empty(len(indices), dtype=np.int64)
        for row, n in enumerate(indices):
            u = self.uniform(request, int(n))
            k = min(int(np.searchsorted(cdf[row], u, side="right")), cdf.shape[1] - 1)
            out[row] = idx[row, k]
        return out
