# %% [markdown]
# # The cost weight: speedup and experts per step against lambda
#
# `ecospec` trades acceptance for experts with one weight, `lambda`. At `lambda = 0` it is exactly
# `confidence`; as `lambda` grows it refuses candidates whose predicted experts are new to the tree.
# Each panel is one bandwidth/placement setting of an H200 (simulated); `confidence` at the same
# budget and the `oracle` bound are the horizontal lines. Replayed on the **real** traces under
# `traces/` (synthetic ones, if present, are left out and said so). Predictor: `oracle` (the true
# routing; an upper bound on any real predictor). Under offload the oracle bound prices every expert
# as a cache hit, which is too loose to be worth drawing, so that panel leaves it out.

# %% tags=["parameters"]
traces = "traces"
out = "reports/_build/lambda_sweep"
validation = ""
budget = 16

# %%
import matplotlib.pyplot as plt
import numpy as np
import polars as pl

import ecosim
from reports._common import kind, real_or_all, save

real, data = real_or_all(traces)
print("replayed:", ", ".join(f"{t.name} ({kind(t)})" for t in real))
lambdas = np.round(np.arange(0, 2.01, 0.1), 2)
settings = [("h200", "1TB/s", "hbm"), ("h200", None, "hbm"), ("h200", None, "ep:4"), ("h200", None, "offload:8")]


def run(specs, hw, bw, placement):
    """The pooled row (totals over the traces) of each policy, in the order given."""
    df = ecosim.replay(real, specs, hw, placement, bw=bw, total=True)
    return df.filter(pl.col("trace") == "total").to_dicts()


fig, axes = plt.subplots(2, len(settings), figsize=(4.2 * len(settings), 7), sharex=True)
for j, (hw, bw, placement) in enumerate(settings):
    specs = [ecosim.PolicySpec("ar"), ecosim.PolicySpec("confidence", budget), ecosim.PolicySpec("oracle")]
    specs += [ecosim.PolicySpec("ecospec", budget, float(l), "oracle") for l in lambdas]
    ar, conf, orc, *eco = run(specs, hw, bw, placement)
    sp = [ar["time_per_token_s"] / e["time_per_token_s"] for e in eco]
    top, bottom = axes[0, j], axes[1, j]
    top.plot(lambdas, sp, marker=".", label="ecospec (oracle predictor)")
    top.axhline(ar["time_per_token_s"] / conf["time_per_token_s"], color="C1", ls="--", label=f"confidence b={budget}")
    if not ecosim.placement_of(placement).stateful:  # under offload the bound prices every expert as a hit: too loose to draw
        top.axhline(ar["time_per_token_s"] / orc["time_per_token_s"], color="k", ls=":", label="oracle bound")
    top.set_title(f"{hw} {bw or 'data-sheet bw'}, {placement}", fontsize=9)
    bottom.plot(lambdas, [e["experts_per_step"] for e in eco], marker=".", label="ecospec")
    bottom.axhline(conf["experts_per_step"], color="C1", ls="--", label="confidence")
    bottom.set_xlabel("lambda (cost weight)")
    if j == 0:
        top.set_ylabel("speedup over ar (x)")
        bottom.set_ylabel("experts loaded per step")
        top.legend(fontsize=7)
    best = int(np.argmax(sp))
    print(f"{hw} {bw or ''} {placement}: confidence {ar['time_per_token_s'] / conf['time_per_token_s']:.3f}x, "
          f"best ecospec {sp[best]:.3f}x at lambda {lambdas[best]}, oracle {ar['time_per_token_s'] / orc['time_per_token_s']:.3f}x")
fig.suptitle(f"ecospec against lambda, budget {budget} (simulated on {data} traces)")
save(fig, out, "lambda_sweep")
plt.show()
