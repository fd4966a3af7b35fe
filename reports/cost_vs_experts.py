# %% [markdown]
# # Verification time grows with the experts a step wakes
#
# **Claim C2 (the paper's Fig. 1a).** At batch 1 a MoE verification step is bound by reading expert
# weights, so its time grows about linearly with the number of distinct experts it activates, not
# with the number of tokens it verifies.
#
# The curves are the **simulator's cost model** (`ecosim/cost/`, full mode: expert reads, compute,
# dense weights, attention, overhead) for a DeepSeek-V3.1-shaped step of 16 tokens on each catalogue
# device, with the union spread evenly over the 58 MoE layers. Measured points come from the
# validator (`validate report`) when a validation folder is given; they are real measurements.

# %% tags=["parameters"]
traces = "traces"
out = "reports/_build/cost_vs_experts"
validation = ""

# %%
import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import ecosim
from reports._common import save

model = ecosim.model_shape("deepseek-v3.1")
L, E, k = model.num_moe_layers, model.num_experts, model.top_k
per_layer = np.arange(k, E + 1, 4)
tokens = np.full(len(per_layer), 16)
context = np.full(len(per_layer), 1024)

fig, ax = plt.subplots()
for name, device in ecosim.devices().items():
    t = ecosim.step_times(model, device, np.repeat(per_layer[:, None], L, axis=1), tokens, context)
    ax.plot(per_layer * L, t * 1e3, label=f"{name} ({device.hbm_bw / 1e12:.3g} TB/s)")
ax.set_xlabel(f"active experts per step (sum over {L} MoE layers)")
ax.set_ylabel("simulated verification time (ms)")
ax.set_title("DeepSeek-V3.1 shape, 16 tokens, 1 device holding all experts (simulated)")

measured = Path(validation) / "comparison.json" if validation else None
if measured and measured.is_file():
    rows = json.loads(measured.read_text())["steps"]
    ax.scatter([r["experts"] for r in rows], [r["measured_s"] * 1e3 for r in rows], color="k", s=10,
               label="measured (validator)")
else:
    print("no validator output given: simulated curves only")
ax.legend(fontsize=8)
save(fig, out, "cost_vs_experts")
plt.show()

# %%
slope = {n: ecosim.step_times(model, d, np.full((2, L), [[k], [k + 1]]), np.array([16, 16]), np.array([1024, 1024]))
         @ np.array([-1.0, 1.0]) / L * 1e6 for n, d in ecosim.devices().items()}
for n, s in slope.items():
    print(f"{n:>7}: +{s:.2f} us per extra expert activated in one MoE layer")
