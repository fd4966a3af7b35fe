# %% [markdown]
# # The step model against published measurements
#
# `ecosim fidelity` predicts every published measurement of MoE decoding that the simulator can
# reproduce (the table `ecosim/catalog/data/published.json`, each row with its URL and quoted
# text) and compares. The serving profile's free constants (step, kernel and collective latency,
# the speculative step's per-level latency and host sync) are fitted on the rows marked *fit*
# only; every other row is held out, and the fit rows are also predicted leave-one-out. Speculative rows use **synthetic** traces (`ecosim synth`) whose
# acceptance knob is bisected to the row's accept length; the measurements themselves are real,
# published by the engines' authors and users (not measured here).

# %% tags=["parameters"]
traces = "traces"
out = "reports/_build/published"
validation = ""

# %%
import matplotlib.pyplot as plt
import numpy as np

import ecosim
from reports._common import save

doc = ecosim.published("cuda-graphs")
results, skipped, PLAIN = doc["results"], doc["skipped"], doc["plain_metrics"]
print("fitted (s):", doc["fitted"])
print(f"{len(results)} rows predicted, {len(skipped)} not (batch > 1, no acceptance length, unknown shape or hardware)")
for k, v in doc["summary"].items():
    if k == "separate":  # rows whose own source calls them another configuration: listed, not summarised
        for r in v:
            print("separate:", r["id"], r["metric"], f"error {r['error']:+.1%}", "-", r["why"][:120])
        continue
    print(k, {a: (round(b, 3) if isinstance(b, float) else b) for a, b in v.items()})

# %% [markdown]
# Left: plain batch-1 decoding, predicted against published tokens per second (rows given in ms
# per token are converted); the band is +-15% and +-30%. Right: speculative speedups over plain
# decoding and step-time ratios against tokens verified. Filled markers are the fit set.

# %%
def tok_s(x):
    return (x.row["value"], x.predicted) if x.row["metric"] == "decode_tok_s" else (1e3 / x.row["value"], 1e3 / x.predicted)


fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5))
plain = [x for x in results if x.row["metric"] in PLAIN]
lim = [20, 600]
grid = np.linspace(*lim, 50)
for band, a in ((0.30, 0.08), (0.15, 0.15)):
    left.fill_between(grid, grid * (1 - band), grid * (1 + band), color="C0", alpha=a, lw=0)
left.plot(lim, lim, "k:", lw=1)
for x in plain:
    pub, pred = tok_s(x)
    left.scatter(pub, pred, color="C3" if x.row.get("fit") else "C0", marker="o" if x.row.get("fit") else "s",
                 facecolors=None if x.row.get("fit") else "none")
    left.annotate(x.row["id"][:24], (pub, pred), fontsize=6, alpha=0.7)
left.set(xscale="log", yscale="log", xlim=lim, ylim=lim, xlabel="published tok/s (batch 1)", ylabel="predicted tok/s",
         title="plain decoding (red: fit set; blue: held out)")
other = [x for x in results if x.row["metric"] in ("spec_speedup", "verify_step_ratio")]
for x in other:
    c = "C2" if x.row["metric"] == "spec_speedup" else "C4"
    right.scatter(x.row["value"], x.predicted, color=c)
right.plot([0.6, 3], [0.6, 3], "k:", lw=1)
right.axhline(1, color="grey", lw=0.5)
right.axvline(1, color="grey", lw=0.5)
right.set(xlabel="published", ylabel="predicted", title="speculative speedup (green), step time ratio (purple)")
save(fig, out, "published_vs_predicted")
plt.show()
