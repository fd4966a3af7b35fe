"""What `ecosim inspect` says of a trace: its shape, its trees, acceptance and expert usage."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from ecosim.policies import PolicySpec
from ecosim.replay import TraceReplay
from ecosim.trace.io import Trace

BUDGET = 16  # the budget at which acceptance is quoted everywhere: confidence at budget 16


def disk_bytes(trace: Trace) -> int:
    return sum(f.stat().st_size for f in trace.path.iterdir() if f.is_file())


def _usage(e: np.ndarray, num_layers: int, num_experts: int) -> tuple[float, list[float], int]:
    counts = np.zeros((num_layers, num_experts), dtype=np.int64)
    for layer in range(num_layers):
        counts[layer] = np.bincount(e[:, layer].ravel(), minlength=num_experts)
    fair = counts.sum(axis=1, keepdims=True) / num_experts
    share = counts / np.maximum(fair, 1e-12)
    top = float(share.max()) if counts.size else 0.0
    return top, [round(float(x), 3) for x in share.max(axis=1)], int((counts == 0).sum())


def expert_usage(trace: Trace) -> dict[str, Any]:
    """Routed-slot share of each expert, per layer: over the target's own continuation (the roots,
    what decoding routes) and over every recorded node (what verifying the whole trees routes).

    `max_over_fair` is the largest share over 1/num_experts (1.0 = perfectly balanced);
    `dead` counts experts of any layer that no root token was routed to.
    """
    m = trace.model
    experts = trace.experts_3d()
    roots = trace.nodes["node"] == 0
    top, per_layer, dead = _usage(experts[roots], m.num_moe_layers, m.num_experts)
    top_all, _, dead_all = _usage(experts, m.num_moe_layers, m.num_experts)
    return {
        "tokens": int(roots.sum()),
        "max_over_fair": top,
        "max_over_fair_per_layer": per_layer,
        "dead": dead,
        "all_nodes": {"nodes": int(len(experts)), "max_over_fair": top_all, "dead": dead_all},
    }


def summarize(trace: Trace) -> dict[str, Any]:
    """The figures `ecosim inspect` prints, as one JSON-able dict."""
    r = TraceReplay(trace)
    t = r.trees
    m = trace.model
    reqs = trace.manifest["requests"]
    tasks = Counter(q["task"] for q in reqs)
    positions_by_task = Counter()
    for q in reqs:
        positions_by_task[q["task"]] += q["positions"]
    steps = r.steps(PolicySpec("confidence", BUDGET))
    task_of = {int(q["request_id"]): q["task"] for q in reqs}
    per_task: dict[str, list[int]] = {}
    for rid, tok in zip(steps.request.tolist(), steps.tokens.tolist()):
        acc = per_task.setdefault(task_of[rid], [0, 0])
        acc[0] += tok
        acc[1] += 1
    n = t.n_nodes
    return {
        "trace": trace.name,
        "synthetic": trace.synthetic,
        "provenance": trace.provenance,
        "model": m.name,
        "family": m.family,
        "moe_layers": m.num_moe_layers,
        "num_experts": m.num_experts,
        "top_k": m.top_k,
        "draft": trace.manifest["draft"].get("name"),
        "tree": trace.manifest["tree"],
        "requests": len(reqs),
        "requests_by_task": dict(sorted(tasks.items())),
        "positions": int(t.n_trees),
        "positions_by_task": dict(sorted(positions_by_task.items())),
        "nodes": int(t.n_rows),
        "nodes_per_tree_mean": float(n.mean()) if len(n) else 0.0,
        "nodes_per_tree_max": int(n.max(initial=0)),
        "full_tree_tokens_per_step": float((t.accept_len + 1).mean()) if len(n) else 0.0,
        f"confidence_b{BUDGET}_tokens_per_step": steps.tokens.sum() / max(1, len(steps)),
        f"confidence_b{BUDGET}_tokens_per_step_by_task": {k: v[0] / v[1] for k, v in sorted(per_task.items())},
        "experts_per_node_per_layer": m.top_k,
        "expert_usage": expert_usage(trace),
        "disk_bytes": disk_bytes(trace),
    }
