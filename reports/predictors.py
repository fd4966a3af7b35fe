# %% [markdown]
# # Expert predictors: how well they name the experts, and how much of the oracle's gain `ecospec` keeps
#
# `ecospec` cannot see the target's routing before it verifies: it scores candidates with an expert
# predictor (`freq`: per-layer popularity; `token`: per-token frequencies backed off to `freq`;
# `context`: a small numpy model on draft-side features; `oracle`: the true routing, a bound).
# Every request is predicted by a model fitted on the trace's *other* requests (k-fold by request),
# and the same predictions feed both the recall and the replay.
#
# 1. Recall@k per MoE layer: the share of the true top-k experts in the predicted top-k. Left: the
#    **real** traces under `traces/` (recorded from the trained tiny pair, 4 MoE layers of 32
#    experts, top-4). Right: a small **synthetic** DeepSeek-V3.1-shaped trace (`ecosim synth`, 58
#    MoE layers of 256 experts, top-8, routed by its calibrated preset: gpt-oss-20b's fit to real
#    routing scaled by shape, ecosim/routing/scale.py): an illustration of the model, not a measurement. It is
#    smaller here (24 positions, 2-fold) than for the README's table (64 positions, 4-fold), so its
#    predictors train on less and their recall is lower.
# 2. On the real traces, simulated H200: `ecospec` at each predictor's best lambda against
#    `confidence` at the same budget. Left: the fraction of the `oracle` predictor's gain (confidence's
#    time per token minus ecospec's) each predictor keeps; right: time per token against lambda under
#    `offload:8`, where expert reads cost (32 experts per layer, 8 cached in HBM, misses over PCIe).
#    With all experts in HBM the tiny model is overhead-bound and no predictor gains anything.
# 3. Experts loaded per step against tokens per step along each predictor's lambda curve, with
#    `confidence` at the same budget and each predictor's best lambda marked.
#
# Definitions: `ecosim/analysis/predictor_compare.py`. The same numbers, on a finer lambda grid, come from
# `ecosim predictor compare traces` (the README's table).

# %% tags=["parameters"]
traces = "traces"
out = "reports/_build/predictors"
validation = ""
budget = 16
lambdas = "0:0.2:0.025,0.3,0.5"  # coarser than the CLI's default grid, to build in a couple of minutes
placements = "hbm,offload:8"
synthetic_requests = 4
synthetic_positions = 24
synthetic_folds = 2  # the context model is costly at 58 x 256 experts: 2 folds of 2 requests each

# %%
import os

# One BLAS thread: the context model's small matrix products only lose to thread hand-offs on a
# busy 2-core machine (6x the CPU time measured here). Effective only before numpy loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import time

import matplotlib.pyplot as plt
import numpy as np

import ecosim
from reports._common import kind, real_or_all, save

t0 = time.time()
real, data = real_or_all(traces)
print("replayed:", ", ".join(f"{t.name} ({kind(t)})" for t in real))
doc = ecosim.compare_predictors(real, budget=budget, lambdas=lambdas, hardware="h200", placements=placements)
lams = doc["lambdas"]
synth = ecosim.synthetic("deepseek-v3.1", name="deepseek-v3.1-synthetic", requests=synthetic_requests,
                         positions=synthetic_positions, seed=0)
sdoc = ecosim.compare_predictors([synth], budget=budget, lambdas=[0.0], placements=[], folds=synthetic_folds,
                                 replay=False)
both = {**doc, "groups": doc["groups"] + sdoc["groups"]}
for table in ecosim.predictor_tables(both):
    print(table, end="\n\n")
print(f"(synthetic recall with {synthetic_folds}-fold by request; computed in {time.time() - t0:.0f} s)")

# %% [markdown]
# ## 1. Recall@k per MoE layer (held-out requests)

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 4.3), gridspec_kw={"width_ratios": [1, 2]})
for ax, grp, E in zip(axes, [doc["groups"][0], sdoc["groups"][0]], [real[0].model.num_experts, synth.model.num_experts]):
    for i, (name, r) in enumerate(grp["predictors"].items()):
        per = [np.nan if x is None else x for x in r["per_layer"]["recall"]]
        ax.plot(np.arange(len(per)), per, marker="osD^"[i % 4] if len(per) < 10 else ".", ls=["-", "--", "-.", ":"][i % 4],
                color=f"C{i}", label=f"{name} (overall {r['recall']:.3f})")
    ax.axhline(grp["top_k"] / E, color="grey", ls=":", label=f"random guess (k/E = {grp['top_k']}/{E})")
    what = data if grp is doc["groups"][0] else "synthetic"  # left: the traces replayed; right: generated
    ax.set_title(f"{what}: {grp['model']} ({len(grp['traces'])} trace(s))", fontsize=10)
    ax.set_xlabel("MoE layer (index among the MoE layers)")
    ax.set_ylabel(f"recall@{grp['top_k']} (share of true top-{grp['top_k']} predicted)")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=8, loc="lower right")
fig.suptitle("Recall@k of each expert predictor per MoE layer, every request predicted by a model fitted on other requests")
save(fig, out, "recall_per_layer")
plt.show()

# %% [markdown]
# ## 2. The fraction of the oracle predictor's gain each predictor keeps (real traces)

# %%
grp = doc["groups"][0]
fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.3))
width = 0.8 / len(grp["pricings"])
names = list(grp["predictors"])
for j, p in enumerate(grp["pricings"]):
    x = np.arange(len(names)) + (j - (len(grp["pricings"]) - 1) / 2) * width
    label = f"h200 {p['placement']}"
    if p["oracle_gain_s"] is None or p["oracle_gain_s"] <= 0:
        left.bar(x, np.zeros(len(names)), width, color=f"C{j}", label=f"{label}: oracle gains nothing")
        for xi in x:
            left.text(xi, 0.02, "0 gain", ha="center", va="bottom", fontsize=7, rotation=90)
        continue
    kept = [e["kept"] for e in p["ecospec"]]
    bars = left.bar(x, kept, width, color=f"C{j}",
                    label=f"{label}: oracle gains {p['oracle_gain_s'] * 1e6:.2f} µs/token")
    for b, e in zip(bars, p["ecospec"]):
        left.text(b.get_x() + b.get_width() / 2, b.get_height() + 0.02, f"{e['kept']:.2f}\nλ={e['best_lambda']:g}",
                  ha="center", va="bottom", fontsize=7)
left.set_xticks(np.arange(len(names)), names)
left.set_xlabel("expert predictor of ecospec")
left.set_ylabel("fraction of the oracle predictor's gain kept")
left.set_ylim(0, 1.35)
left.legend(fontsize=8, loc="upper left")
left.set_title(f"gain = confidence − ecospec (best λ) time per token, budget {budget}", fontsize=9)
bound = next((p for p in grp["pricings"] if ecosim.placement_of(p["placement"]).stateful), grp["pricings"][-1])
for i, e in enumerate(bound["ecospec"]):
    right.plot([c["lambda"] for c in e["curve"]], [c["time_per_token_s"] * 1e6 for c in e["curve"]], marker=".",
               color=f"C{i}", label=f"ecospec, {e['predictor']}")
right.axhline(bound["confidence"]["time_per_token_s"] * 1e6, color="k", ls="--", label=f"confidence b={budget}")
right.set_xlabel("lambda (cost weight)")
right.set_ylabel("simulated time per token (µs)")
right.set_title(f"h200 {bound['placement']} ({data} traces)", fontsize=9)
right.legend(fontsize=8)
fig.suptitle(f"How much of the oracle predictor's gain each predictor keeps ({data} traces, simulated H200)")
save(fig, out, "oracle_gain_kept")
plt.show()

# %% [markdown]
# ## 3. Experts loaded per step against tokens per step (real traces)
#
# The selection does not depend on the pricing, so each predictor has one curve over lambda (lambda 0,
# the top right end, is `confidence`); the markers show each predictor's best lambda under each pricing.
# `freq` predicts the same set for every candidate, so no candidate ever brings a predicted new expert:
# with it `ecospec` is `confidence` at every lambda (its curve is the single point under the star).

# %%
fig, ax = plt.subplots(figsize=(7.5, 5))
conf = grp["pricings"][0]["confidence"]
for i, e in enumerate(grp["pricings"][0]["ecospec"]):
    ax.plot([c["tokens_per_step"] for c in e["curve"]], [c["experts_per_step"] for c in e["curve"]], marker=".",
            color=f"C{i}", lw=1, label=f"ecospec, {e['predictor']} (λ {lams[0]:g}..{lams[-1]:g})")
for j, p in enumerate(grp["pricings"]):
    for i, e in enumerate(p["ecospec"]):
        b = e["best"]
        ax.scatter(b["tokens_per_step"], b["experts_per_step"], s=90, marker="os^D"[j % 4], facecolors="none",
                   edgecolors=f"C{i}", linewidths=1.5, zorder=3)
    ax.scatter([], [], marker="os^D"[j % 4], facecolors="none", edgecolors="grey", label=f"best λ under h200 {p['placement']}")
ax.scatter(conf["tokens_per_step"], conf["experts_per_step"], marker="*", s=200, color="k", zorder=4,
           label=f"confidence b={budget}")
ax.set_xlabel("tokens per verification step (accepted + 1)")
ax.set_ylabel("experts loaded per step (distinct, summed over MoE layers)")
ax.set_title(f"ecospec per predictor against confidence, budget {budget} ({data} traces)", fontsize=10)
ax.legend(fontsize=8)
save(fig, out, "experts_vs_tokens")
plt.show()
