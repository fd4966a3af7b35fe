# %% [markdown]
# # The front: time per token against experts loaded per step
#
# Every configuration (policy x budget x lambda) replayed on the traces under `traces/` (real ones;
# synthetic ones only when there are no real ones, and then said so) on a simulated H200 at its
# data-sheet bandwidth. Points on the Pareto front (no other configuration is both faster and
# lighter on experts) are highlighted; the winner (least time per token) is marked.

# %% tags=["parameters"]
traces = "traces"
out = "reports/_build/pareto"
validation = ""

# %%
import matplotlib.pyplot as plt
import numpy as np
import polars as pl

import ecosim
from reports._common import real_or_all, save

real, label = real_or_all(traces)
specs = [ecosim.PolicySpec("ar")]
specs += [ecosim.PolicySpec("confidence", b) for b in (2, 4, 8, 16, 32)]
specs += [ecosim.PolicySpec("ecospec", b, float(l), "oracle") for b in (4, 8, 16, 32) for l in (0.1, 0.25, 0.5, 1.0, 2.0)]
pooled = ecosim.replay(real, specs, "h200", "hbm", total=True).filter(pl.col("trace") == "total")  # totals over the traces
points = [(s, row["experts_per_step"], row["time_per_token_s"] * 1e3) for s, row in zip(specs, pooled.to_dicts())]


def front(pts):
    keep = []
    for s, x, y in pts:
        if not any((x2 <= x and y2 <= y) and (x2 < x or y2 < y) for _, x2, y2 in pts):
            keep.append((s, x, y))
    return sorted(keep, key=lambda p: p[1])


f = front(points)
winner = min(points, key=lambda p: p[2])
fig, ax = plt.subplots()
for name, color in (("ar", "k"), ("confidence", "C1"), ("ecospec", "C0")):
    xs = [(x, y) for s, x, y in points if s.name == name]
    ax.scatter(*zip(*xs), color=color, s=18, label=name, alpha=0.7)
ax.plot([p[1] for p in f], [p[2] for p in f], color="C2", lw=2, label="Pareto front")
ax.scatter([winner[1]], [winner[2]], marker="*", s=250, color="C3", zorder=5, label=f"winner: {winner[0].label()}")
ax.set_xlabel("experts loaded per step (sum over MoE layers)")
ax.set_ylabel("time per token (ms, simulated H200)")
ax.set_title(f"time per token against experts per step ({label} traces)")
ax.legend(fontsize=8)
save(fig, out, "pareto")
plt.show()

# %%
print("front:")
for s, x, y in f:
    print(f"  {s.label():<32} experts/step {x:8.1f}   ms/token {y:.4f}")
