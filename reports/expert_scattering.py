# %% [markdown]
# # Expert scattering: the union of experts grows with the draft tree
#
# **Claim C1 (EcoSpec's motivation).** A verification step reads the *union* of the experts its
# tokens route to, per MoE layer. Under confidence-only selection (EAGLE-2's rerank), the union grows
# almost as fast as the tree: the tokens of a draft tree scatter over experts.
#
# Left: the **real** traces committed under `traces/` (recorded from the trained tiny pair), one line
# per task kind. Right: the catalogue's model shapes, **synthetic** traces routed by each shape's
# calibrated preset (`ecosim.synthetic`, synth.py: gpt-oss-20b's fit to real routing, the other shapes
# the same fit scaled by shape, ecosim/routing/scale.py), and where real gpt-oss-20b routing is at
# hand a **hybrid** gpt-oss-20b trace (the real continuation, generated draft trees). Synthetic and
# hybrid traces illustrate the model; they are not measurements. Each line is the mean over
# positions and MoE layers of the union size at that tree size; the dashed lines are perfect overlap
# (top-k: every token shares the root's experts), no overlap (top-k x tokens) and the all-experts
# ceiling.
#
# Real gpt-oss-20b routing: AmanPriyanshu/GPT-OSS-MoE-ExpertFingerprinting (Apache-2.0), converted in
# `../shared/data/gpt-oss-20b-routing/` (`ecosim report --routing DIR` to give another place).

# %% tags=["parameters"]
traces = "traces"
out = "reports/_build/expert_scattering"
validation = ""
routing = ""

# %%
import matplotlib.pyplot as plt
import numpy as np

import ecosim
from reports._common import kind, load_traces, save, task_of

BUDGETS = [0, 1, 2, 4, 8, 16, 24, 32, 48]


def scattering(trace, budgets=BUDGETS):
    """(budgets, 2): mean tree size and mean distinct experts per layer of confidence at each budget."""
    df = ecosim.unions(trace, [ecosim.PolicySpec("confidence", b) for b in budgets])
    return df.select("tokens", "experts_per_layer").to_numpy()


real = [t for t in load_traces(traces) if not t.synthetic]
print(f"{len(real)} real traces:", ", ".join(f"{t.name} ({task_of(t)}, {t.model.name})" for t in real))

# %%
shapes = ["deepseek-v3.1", "qwen3-235b-a22b", "gpt-oss-120b", "gpt-oss-20b", "olmoe-1b-7b", "mixtral-8x7b"]
TREE = dict(max_nodes=48, depth=7, seed=1)
real_routing = None
if routing:
    real_routing = ecosim.import_routing(routing)  # an ecosim routing set or any importable source
    print(f"real routing: {real_routing.model}, {len(real_routing.seq_len)} sequences, {real_routing.n_tokens} tokens ({routing})")
else:
    print("no real routing given (ecosim report --routing DIR): the hybrid trace and the real rows are left out")
synthetic = {s: ecosim.synthetic(s, requests=2, positions=96, **TREE) for s in shapes}
hybrid = (ecosim.synthetic("gpt-oss-20b", routing=real_routing, requests=8, positions=128, **TREE)
          if real_routing is not None else None)
big = {"synthetic, calibrated": ecosim.synthetic("gpt-oss-20b", requests=8, positions=128, **TREE),
       "synthetic, uncalibrated knobs": ecosim.synthetic("gpt-oss-20b", preset=False, requests=8, positions=128, **TREE)}

fig, (a, b) = plt.subplots(1, 2, figsize=(13, 4.8))
for t in real:
    xy = scattering(t)
    a.plot(xy[:, 0], xy[:, 1], marker="o", label=f"{t.name} ({task_of(t)}, real)" if t.name != task_of(t) else f"{t.name} (real)")
if real:
    m = real[0].model
    x = np.linspace(1, max(a.get_xlim()[1], 2), 50)
    a.plot(x, np.full_like(x, m.top_k), "k:", label=f"perfect overlap (top-{m.top_k})")
    a.plot(x, np.minimum(m.top_k * x, m.num_experts), "k--", label="no overlap (top-k x tokens)")
    a.axhline(m.num_experts, color="grey", ls="-.", label=f"all {m.num_experts} experts")
    a.set_title(f"real traces: {m.name}, {m.num_moe_layers} MoE layers")
a.set_xlabel("tokens verified per step (tree size, root included)")
a.set_ylabel("distinct experts per MoE layer (mean)")
a.legend(fontsize=8)
for name, t in synthetic.items():
    xy = scattering(t)
    b.plot(xy[:, 0], xy[:, 1] / t.model.num_experts, marker=".", label=f"{name} ({kind(t)}, calibrated preset)")
if hybrid is not None:
    xy = scattering(hybrid)
    b.plot(xy[:, 0], xy[:, 1] / hybrid.model.num_experts, "k-", marker="s", label=f"gpt-oss-20b ({kind(hybrid)}: real continuation)")
b.set_xlabel("tokens verified per step (tree size, root included)")
b.set_ylabel("fraction of a layer's experts read")
b.set_title("catalogue shapes: synthetic (calibrated) and hybrid (illustration)")
b.set_ylim(0, 1.02)
b.legend(fontsize=8)
save(fig, out, "expert_scattering")
plt.show()

# %% [markdown]
# The table gives the numbers behind the left panel at budget 16 (17 tokens per step at most).

# %%
for t in real:
    xy = scattering(t, [0, 16])
    print(f"{t.name:>12} ({kind(t)}): 1 token -> {xy[0,1]:.2f} experts/layer; {xy[1,0]:.1f} tokens -> {xy[1,1]:.2f} "
          f"experts/layer ({xy[1,1] / xy[0,1]:.2f}x for {xy[1,0]:.1f}x the tokens)")

# %% [markdown]
# ## How real is the routing? Real, hybrid and synthetic side by side
#
# The statistics of ecosim/routing/stats.py (means over layers; `ecosim inspect --routing` prints
# the same) on real gpt-oss-20b routing (all answers), a hybrid trace of its first 8 answers, the
# calibrated generator's gpt-oss-20b trace, the same generator with uncalibrated knobs, and the
# committed real traces of the tiny target. The tiny target's traces are less local than
# gpt-oss-20b: the sequence-wise balance loss of its training pushes experts apart inside every
# sequence, which production models, balanced over batches, are not trained to do.

# %%
rows = []
if real_routing is not None:
    rows.append((f"real: {real_routing.model}, all {len(real_routing.seq_len)} answers", ecosim.routing_stats(real_routing)))
if hybrid is not None:
    rows.append(("hybrid: gpt-oss-20b, first 8 answers", ecosim.routing_stats(hybrid)))
for label, t in big.items():
    rows.append((f"{label}: gpt-oss-20b", ecosim.routing_stats(t)))
for t in real:
    rows.append((f"real: {t.name} ({t.model.name})", ecosim.routing_stats(t)))


def f(x, nd=2):
    return "-" if x is None else f"{x:.{nd}f}"


print(f"{'data':<48} {'tokens':>7} {'overlap':>8} {'distinct in 4/16/64':>20} {'recall (pop.)':>14} {'busiest/fair':>13} {'sib/par-child':>14}")
for label, st in rows:
    o, tr = st["overall"], st.get("trees") or {}
    w = o["window_distinct"]
    print(f"{label:<48} {st['tokens']:>7} {f(o['neighbour_overlap']):>8} {f(w['4'], 1) + ' / ' + f(w['16'], 1) + ' / ' + f(w['64'], 1):>20} "
          f"{f(o['token_recall']) + ' (' + f(o['popularity_recall']) + ')':>14} {f(o['max_over_fair_median_layer']):>13} "
          f"{f(tr.get('sibling_overlap')) + ' / ' + f(tr.get('parent_child_overlap')):>14}")

# %% [markdown]
# Left: distinct experts per layer in a window of n consecutive tokens of gpt-oss-20b (real, hybrid,
# synthetic). Right: the same in units of top-k for every catalogue shape's calibrated preset (solid)
# against the target its preset was fitted to (dashed: gpt-oss-20b's real curve scaled to the shape
# by keeping the effective tokens of each window, ecosim/routing/scale.py). Only gpt-oss-20b's curve
# is checked against real routing; the others are the scaling rule's consequence, not measurements.

# %%
fig, (a, b) = plt.subplots(1, 2, figsize=(13, 4.8))
n = np.arange(1, 65)
for label, st in rows:
    if (st["layers"], st["num_experts"], st["top_k"]) == (24, 32, 4):  # gpt-oss-20b's shape
        w = st["overall"]["window_distinct"]
        a.plot(n, [w[str(i)] if w[str(i)] is not None else np.nan for i in n], label=label)
a.axhline(32, color="grey", ls="-.", label="all 32 experts")
a.set_xscale("log", base=2)
a.set_xlabel("window of n consecutive tokens")
a.set_ylabel("distinct experts per layer (mean)")
a.set_title("gpt-oss-20b: real, hybrid, synthetic")
a.legend(fontsize=7)
real_curve = ([rows[0][1]["overall"]["window_distinct"][str(i)] for i in n] if real_routing is not None else None)
for name, t in synthetic.items():
    st = ecosim.routing_stats(t, trees=False)
    k = t.model.top_k
    line, = b.plot(n, [(st["overall"]["window_distinct"][str(i)] or np.nan) / k for i in n], label=f"{name} ({t.model.num_experts} x top-{k})")
    if real_curve is not None:
        b.plot(n, [ecosim.scale_distinct(d, "gpt-oss-20b", t.model) / k for d in real_curve], ls="--", color=line.get_color())
b.set_xscale("log", base=2)
b.set_xlabel("window of n consecutive tokens")
b.set_ylabel("distinct experts per layer / top-k")
b.set_title("calibrated presets by shape (dashed: scaled real target)")
b.legend(fontsize=7)
save(fig, out, "routing_side_by_side")
plt.show()
