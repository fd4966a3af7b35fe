"""Acceptance of the full recorded trees of two or more traces, over the requests they share.

    python -m tracer.acceptance traces/coding traces/eagle3-coding

A node is accepted when every node on its path was: its token equals its parent's `target_next`
(greedy verification). Per position, the accepted length is the depth of the deepest accepted
node of the whole recorded tree (depth <= `tree.depth`, at most `max_nodes` nodes), and a step
yields that plus one token (the target's own next token). Printed per trace: mean tokens per step
(accepted + 1) and the share of positions whose depth-1 draft contains the target's next token,
over the (request, position) pairs every given trace holds, so traces recorded with different
drafts over different numbers of prompts compare on the same positions.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from ecosim.trace.io import read_trace


def accepted(trace) -> dict[tuple[int, int], int]:
    """(request_id, pos) -> accepted length of that position's full tree."""
    n = trace.nodes
    out: dict[tuple[int, int], int] = {}
    s = trace.tree_start
    for i in range(trace.n_trees):
        a, b = int(s[i]), int(s[i + 1])
        tok, par, nxt, dep = n["token"][a:b], n["parent"][a:b], n["target_next"][a:b], n["depth"][a:b]
        ok = np.zeros(b - a, dtype=bool)
        ok[0] = True
        for v in range(1, b - a):  # topological order: parent < node
            p = int(par[v])
            ok[v] = ok[p] and tok[v] == nxt[p]
        out[(int(n["request_id"][a]), int(n["pos"][a]))] = int(dep[ok].max())
    return out


def compare(paths: list[str]) -> dict[str, dict[str, float]]:
    per = {p: accepted(read_trace(p)) for p in paths}
    common = set.intersection(*(set(v) for v in per.values()))
    res = {}
    for p, acc in per.items():
        lengths = np.array([acc[k] for k in sorted(common)])
        res[p] = {"positions": len(lengths), "tokens_per_step": round(float(lengths.mean() + 1), 4),
                  "depth1_hit": round(float((lengths >= 1).mean()), 4)}
    return res


def main(argv: list[str] | None = None) -> int:
    paths = sys.argv[1:] if argv is None else argv
    if not paths:
        print("usage: python -m tracer.acceptance TRACE [TRACE ...]", file=sys.stderr)
        return 2
    print(json.dumps(compare(paths), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
