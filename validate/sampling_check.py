"""`validate sampling-check`: is speculative decoding at T > 0 lossless *in distribution*?

`validate run` checks losslessness with common random numbers: the same seed gives speculative and plain decoding
the same random number for each generated index, so their tokens must be equal. That proves the decoder follows
the target's draws, not that the verification rule is unbiased: a rule that accepted drafts too eagerly would
still match on every index where it draws. Lossless means the emitted tokens are *distributed* as the target's own
samples, so this check draws N samples of the first K generated tokens of each prompt plainly (seeds s, s+1, ...)
and N with speculation (seeds s+N, s+N+1, ...: independent of the plain ones, so that the test has power) and
compares the two histograms of (prompt, K-token sequence) with Pearson's chi-square test of homogeneity
(validate/chisquare.py). p below `alpha` fails. A sequence seen fewer than `min_count` times over both arms is
counted as its prefix one token shorter (then two, ...: `coarsen`), so the test keeps the sequences' first tokens
where a long tail of rare sequences would otherwise go into one pooled category.

The speculative arm is `validate run`'s step (validate/decode.py): the draft's EAGLE-2 tree from the root, one
target forward over it, each node's next token drawn with the random number of the index it fills, the accepted
path (`accept_path`, target-only verification, ecosim/sampling.py) plus the target's token after it. A sample's
tokens depend on the forwards only through the context they start from, so each context's forward runs once
(`Forwards`) and N samples cost one forward per distinct context, not N.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ecosim.tree_config import TreeShape
from tracer.pair import Pair
from tracer.sampler import Sampler
from tracer.tree import Tree
from validate.chisquare import Homogeneity, homogeneity
from validate.decode import accept_path, draft_tree, subtree, verify_subtree
from validate.sampling_config import SamplingCheck

# a verification rule: (tree, the target's logits at its nodes, sampler, request, generated index of the root)
# -> the tokens the step emits after the root (accepted drafts, then the target's own token)
Rule = Callable[[Tree, torch.Tensor, Sampler, int, int], list[int]]


def target_only(tree: Tree, logits: torch.Tensor, sampler: Sampler, request: int, root_index: int) -> list[int]:
    """The rule `validate run` verifies with: each node draws its next token (index root_index + depth + 1), the
    accepted path follows the draws, and the draw after its deepest node ends the step."""
    nxt = sampler.draw(logits, request, root_index + 1 + tree.depths)
    path = accept_path(tree, nxt)
    return [int(t) for t in tree.tokens[path[1:]]] + [int(nxt[path[-1]])]


class Forwards:
    """The target's (and the draft's) forwards after one prompt, each context computed once."""

    def __init__(self, pair: Pair, prompt: list[int], tree: TreeShape):
        self.pair, self.prompt, self.tree = pair, list(prompt), tree
        self._plain: dict[tuple[int, ...], torch.Tensor] = {}
        self._steps: dict[tuple[int, ...], tuple[Tree, torch.Tensor]] = {}

    def plain(self, done: tuple[int, ...]) -> torch.Tensor:
        """(1, vocab) logits of the token after prompt + `done`."""
        if done not in self._plain:
            tgt = self.pair.target
            tgt.reset()
            self._plain[done] = tgt.extend(torch.tensor(self.prompt + list(done), dtype=torch.long))[-1:].clone()
        return self._plain[done]

    def step(self, done: tuple[int, ...]) -> tuple[Tree, torch.Tensor]:
        """The speculative step whose root is done[-1]: the draft's tree and the target's logits at its nodes."""
        if done not in self._steps:
            p, t = self.pair, self.tree
            ctx = torch.tensor(self.prompt + list(done[:-1]), dtype=torch.long)
            for lm in (p.target, p.draft):
                lm.reset()
                lm.extend(ctx)
            tree = draft_tree(p.draft, [], done[-1], t.depth, t.topk, t.max_nodes, p.target.vocab_size)
            sub, _ = subtree(tree, np.ones(len(tree), dtype=bool))  # the whole tree: lossless for any selection
            kept: list[torch.Tensor] = []
            verify_subtree(p.target, p.capture, sub, lambda lg, d: kept.append(lg.clone()) or np.zeros(len(d), np.int64))
            self._steps[done] = (sub, kept[0])
        return self._steps[done]


def sample_plain(fw: Forwards, sampler: Sampler, request: int, k: int, eos: frozenset[int]) -> tuple[int, ...]:
    """The first k tokens of plain decoding (fewer if EOS comes first)."""
    out: list[int] = []
    while len(out) < k and not (out and out[-1] in eos):
        out.append(int(sampler.draw(fw.plain(tuple(out)), request, np.array([len(out)]))[0]))
    return tuple(out)


def sample_speculative(fw: Forwards, sampler: Sampler, request: int, k: int, eos: frozenset[int],
                       rule: Rule = target_only) -> tuple[int, ...]:
    """The first k tokens of speculative decoding under `rule` (the root is the plain first draw, as in decode.py);
    a step's tokens are cut at the first EOS, as the decoder cuts them."""
    out = [int(sampler.draw(fw.plain(()), request, np.zeros(1, np.int64))[0])]
    while len(out) < k and out[-1] not in eos:
        tree, logits = fw.step(tuple(out))
        for t in rule(tree, logits, sampler, request, len(out) - 1):
            out.append(t)
            if t in eos:
                break
    return tuple(out[:k])


def coarsen(a: Counter, b: Counter, min_count: int) -> tuple[Counter, Counter]:
    """Sequences seen fewer than `min_count` times over both arms become their prefix one token shorter, marked
    with "..." (a category: the prefix followed by a rare continuation), until each is frequent or down to its
    first token; both arms are mapped alike, so the test stays one of homogeneity."""
    a, b = Counter(a), Counter(b)
    real = lambda k: k[1][:-1] if k[1] and k[1][-1] == "..." else k[1]  # noqa: E731  (the tokens it names)
    longest = max((len(real(k)) for k in a | b), default=0)
    for length in range(longest, 1, -1):
        for k in [k for k in set(a) | set(b) if len(real(k)) == length and a[k] + b[k] < min_count]:
            short = (k[0], real(k)[:-1] + ("...",))
            for c in (a, b):
                if k in c:
                    c[short] += c.pop(k)
    return a, b


@dataclass
class Outcome:
    """What the check found."""

    test: Homogeneity
    passed: bool
    plain: Counter
    speculative: Counter
    forwards: int  # distinct contexts run (plain + speculative steps)


def run_check(pair: Pair, prompts: list[list[int]], cfg: SamplingCheck, rule: Rule = target_only) -> Outcome:
    """Both arms on every prompt, then the test (module docstring)."""
    cfg.check()
    a: Counter = Counter()
    b: Counter = Counter()
    n, forwards = cfg.samples, 0
    for rid, prompt in enumerate(prompts):
        fw = Forwards(pair, prompt, cfg.tree)
        for i in range(n):
            a[(rid, sample_plain(fw, cfg.sampler(cfg.seed + i), rid, cfg.tokens, pair.eos_ids))] += 1
            b[(rid, sample_speculative(fw, cfg.sampler(cfg.seed + n + i), rid, cfg.tokens, pair.eos_ids, rule))] += 1
        forwards += len(fw._plain) + len(fw._steps)
    test = homogeneity(*coarsen(a, b, cfg.min_count), cfg.min_count)
    return Outcome(test, test.p_value >= cfg.alpha, a, b, forwards)


def prompt_ids(pair: Pair, paths: list[Path], limit: int | None) -> list[list[int]]:
    from tracer.prompts import read_prompts, tokenize

    return tokenize(read_prompts(paths, limit), pair.tokenizer, pair.target.vocab_size)


def report(cfg: SamplingCheck, out: Outcome, prompts: int) -> list[str]:
    """The lines the command prints."""
    t = cfg.tree
    top = sorted(set(out.plain) | set(out.speculative), key=lambda c: -(out.plain[c] + out.speculative[c]))[:5]
    lines = [
        f"sampling-check: {prompts} prompt(s) x {cfg.samples} samples per arm of the first {cfg.tokens} tokens at "
        f"T={cfg.temperature:g} (top-p {cfg.top_p:g}, top-k {cfg.top_k}), seeds {cfg.seed}.. (plain) and "
        f"{cfg.seed + cfg.samples}.. (speculative: tree depth {t.depth}, topk {t.topk}, max_nodes {t.max_nodes}, "
        f"target-only verification); {out.forwards} distinct forwards",
        "most frequent sequences (prompt: tokens -> plain / speculative): "
        + "; ".join(f"{c[0]}: {list(c[1])} -> {out.plain[c]} / {out.speculative[c]}" for c in top),
        f"chi-square {out.test.statistic:.2f} on {out.test.dof} degrees of freedom ({out.test.categories} categories, "
        f"{out.test.pooled} samples pooled below {cfg.min_count}): p = {out.test.p_value:.4g} "
        f"(threshold {cfg.alpha:g}): {'PASS, same distribution' if out.passed else 'FAIL, the distributions differ'}",
    ]
    return lines
