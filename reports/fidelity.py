# %% [markdown]
# # Fidelity: the simulator's prediction against a real measurement
#
# How right is `ecosim`? `validate run` decodes for real with the winning policy, `ar` and
# `confidence` (checking every token against plain greedy decoding), times every step, and replays
# the trace it recorded on the spot through the simulator with the hardware profile it calibrated.
# This page sets the two side by side: time per token per policy (the simulator's prediction made
# without looking at the measurement), then every real step against the cost model's price for it.
# Every figure is defined once in `validate/compare.py`'s docstring.
#
# **The data is real, measured on a CPU.** By default (no `--validation` folder) it is the
# committed run `tests/validate/data/ecosim-tiny-x256-cpu`: the trained default pair with its
# target's experts widened x256 (same function and routing, 37.7 MB per expert, so a step is bound
# by expert reads), one torch thread, float32, wall clock, on a **2-core Intel Xeon VM shared with
# other engineers' jobs** (load average 2 to 4). Its README says how it was made; the cell below
# prints the machine and clock of whichever run is shown. Magnitudes are those of a tiny model on
# a CPU, not of DeepSeek-scale GPUs: what transfers is whether the simulator is right.

# %% tags=["parameters"]
traces = "traces"
out = "reports/_build/fidelity"
validation = ""

# %%
import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from reports._common import save

FIXTURE = Path("tests/validate/data/ecosim-tiny-x256-cpu")  # a committed real run (relative to the repo root)


def comparison(folder: str) -> tuple[dict, str]:
    """The comparison document of a `validate report` folder; a run directory without one (or the
    committed fixture) is compared here with validate's own function, written beside the HTML."""
    run = Path(folder) if folder else FIXTURE
    if (run / "comparison.json").is_file():
        return json.loads((run / "comparison.json").read_text()), f"{run}/comparison.json"
    from validate.compare import compare_run  # ecosim + polars only: no torch

    return compare_run(run, out=Path(out)), f"`validate report {run}` (written to {out}/comparison.json)"


doc, source = comparison(validation)
env = doc.get("measured_environment") or {}
clock = env.get("clock", "wall")
machine = f"{env.get('device', doc['device'])}, {env.get('threads', '?')} torch thread(s), {env.get('dtype', '?')}, {clock} clock"
where = "REAL measurement" + (" (committed fixture)" if not validation else "")
print(f"{where}: {source}")
print(f"model {doc['model']} on {machine}; {doc['repeats']} repeats, step phases are medians")
print(f"trace {doc['trace']} ({'synthetic' if doc['trace_synthetic'] else 'real, recorded on the spot'})")
print(f"lossless: {'yes, every policy equals plain greedy decoding' if doc['lossless'] else 'NO'}")
for w in doc.get("warnings", []):
    print(f"warning: {w}")

# %% [markdown]
# ## Time per token: simulated against measured, per policy
#
# One point per policy; on the diagonal the simulator is exact. The shaded band is +-3%, the mean
# absolute error the validator targets. The percentage beside each point is its error,
# 100 x (simulated - measured) / measured.

# %%
pols = doc["policies"]
meas = np.array([p["measured_time_per_token_s"] for p in pols]) * 1e3
sim = np.array([p["simulated_time_per_token_s"] for p in pols]) * 1e3
lo, hi = 0.9 * min(meas.min(), sim.min()), 1.1 * max(meas.max(), sim.max())
grid = np.linspace(lo, hi, 2)

fig, ax = plt.subplots()
ax.plot(grid, grid, color="k", lw=1, label="y = x (exact)")
ax.fill_between(grid, grid * 0.97, grid * 1.03, color="0.85", label="+-3% band")
for i, p in enumerate(pols):
    ax.scatter([meas[i]], [sim[i]], s=70, color=f"C{i}", zorder=3, label=p["label"])
    ax.annotate(f"{p['error_pct']:+.2f}%", (meas[i], sim[i]), textcoords="offset points", xytext=(8, -12), fontsize=9)
ax.set_xlim(lo, hi)
ax.set_ylim(lo, hi)
ax.set_aspect("equal")
ax.set_xlabel(f"measured time per token (ms, {clock} clock, real CPU run)")
ax.set_ylabel("simulated time per token (ms, ecosim replay)")
ax.set_title(f"{where}: MAE {doc['mae_pct']:.2f}%, worst {doc['worst_pct']:.2f}%, "
             f"ranking preserved: {'yes' if doc['ranking_preserved'] else 'NO'}", fontsize=10)
ax.legend(fontsize=8, loc="upper left")
save(fig, out, "time_per_token")
plt.show()

# %%
print(f"{'policy':<28}{'measured ms/tok':>16}{'simulated ms/tok':>18}{'error':>9}{'vs ar meas.':>13}{'vs ar sim.':>12}")
for p in pols:
    su = p.get("measured_speedup_vs_ar")
    ss = p.get("simulated_speedup_vs_ar")
    print(f"{p['label']:<28}{p['measured_time_per_token_s'] * 1e3:>16.2f}{p['simulated_time_per_token_s'] * 1e3:>18.2f}"
          f"{p['error_pct']:>+8.2f}%{su if su is None else format(su, '.3f') + 'x':>13}{ss if ss is None else format(ss, '.3f') + 'x':>12}")
t = doc["targets"]
print(f"\nmean absolute error {doc['mae_pct']:.2f}% (target <= {t['mae_pct']['target']:g}%), "
      f"worst {doc['worst_pct']:.2f}% (target <= {t['worst_pct']['target']:g}%)")
m = doc.get("winner_margin")
if m:
    print(f"\nwinner {m['winner']} vs {m['versus']}: faster by {m['measured_pct']:+.1f}% measured, "
          f"{m['simulated_pct']:+.1f}% predicted (margin error {m['margin_error_pp']:+.2f} pp)")
print(f"ranking measured:  {', '.join(doc['ranking_measured'])}\nranking simulated: {', '.join(doc['ranking_simulated'])}")

# %% [markdown]
# ## Every real step against the cost model's price for it
#
# One point per measured step (draft + select + verify, each the median over the repeats) against
# what the cost model charges for that step: its measured expert union, the tokens it verified and
# its context, plus the profile's draft time when speculative. This isolates the cost model from
# the replay's trajectory. Steps of one policy form clusters by how many experts they woke.

# %%
steps = doc["steps"]
labels = [p["label"] for p in pols]
fig, ax = plt.subplots()
sm = np.array([s["measured_s"] for s in steps]) * 1e3
ss = np.array([s["simulated_s"] for s in steps]) * 1e3
lo, hi = 0.9 * min(sm.min(), ss.min()), 1.05 * max(sm.max(), ss.max())
ax.plot([lo, hi], [lo, hi], color="k", lw=1, label="y = x (exact)")
for i, lab in enumerate(labels):
    mine = [j for j, s in enumerate(steps) if s["policy"] == lab]
    err = 100 * np.median(np.abs(ss[mine] - sm[mine]) / sm[mine])
    ax.scatter(sm[mine], ss[mine], s=12, alpha=0.6, color=f"C{i}",
               label=f"{lab} ({len(mine)} steps, median |error| {err:.1f}%)")
ax.set_xlim(lo, hi)
ax.set_ylim(lo, hi)
ax.set_xlabel(f"measured step time (ms, {clock} clock, real CPU run)")
ax.set_ylabel("cost model's step time (ms)")
ax.set_title(f"{where}: per-step time, {len(steps)} steps of {doc['model']}", fontsize=10)
ax.legend(fontsize=8, loc="upper left")
save(fig, out, "step_times")
plt.show()

# %%
print("not modelled by the simulator here:")
for line in doc["not_modelled"]:
    print(f"  - {line}")
