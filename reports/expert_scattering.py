# %% [markdown]
# # Expert scattering: the union of experts grows with the draft tree
#
# **Claim C1 (EcoSpec's motivation).** A verification step reads the *union* of the experts its
# tokens route to, per MoE layer. Under confidence-only selection (EAGLE-2's rerank), the union grows
# almost as fast as the tree: the tokens of a draft tree scatter over experts.
#
# Left: the **real** traces committed under `traces/` (recorded from the trained tiny pair), one line
# per task kind. Right: **synthetic** traces (`ecosim synth`) of the catalogue's model shapes, which
# illustrate the model only and are not measurements. Each line is the mean over positions and MoE
# layers of the union size at that tree size; the dashed lines are perfect overlap (top-k: every
# token shares the root's experts), no overlap (top-k x tokens) and the all-experts ceiling.

# %% tags=["parameters"]
traces = "traces"
out = "reports/_build/expert_scattering"
validation = ""

# %%
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from ecosim.catalog.models import get_model
from ecosim.policies import PolicySpec
from ecosim.replay import TraceReplay
from ecosim.synth import SynthConfig, write_synthetic
from ecosim.trace.io import read_trace
from reports._common import kind, load_traces, save, task_of

BUDGETS = [0, 1, 2, 4, 8, 16, 24, 32, 48]


def scattering(trace, budgets=BUDGETS):
    r = TraceReplay(trace)
    sizes = r.trees.selected_count
    rows = []
    for b in budgets:
        sel = r.selection(PolicySpec("confidence", b))
        rows.append((float(sizes(sel).mean()), float(r.unions_everywhere(PolicySpec("confidence", b)).mean())))
    return np.array(rows)


real = [t for t in load_traces(traces) if not t.synthetic]
print(f"{len(real)} real traces:", ", ".join(f"{t.name} ({task_of(t)}, {t.model.name})" for t in real))

# %%
shapes = ["deepseek-v3.1", "qwen3-235b-a22b", "gpt-oss-120b", "olmoe-1b-7b", "mixtral-8x7b"]
with tempfile.TemporaryDirectory() as tmp:  # read_trace keeps the whole trace in memory: the files can go
    synthetic = {s: read_trace(write_synthetic(Path(tmp) / s, get_model(s),
                                               SynthConfig(requests=2, positions=60, max_nodes=48, depth=7, seed=1)))
                 for s in shapes}

fig, (a, b) = plt.subplots(1, 2, figsize=(13, 4.8))
for t in real:
    xy = scattering(t)
    a.plot(xy[:, 0], xy[:, 1], marker="o", label=f"{task_of(t)} (real)")
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
    b.plot(xy[:, 0], xy[:, 1] / t.model.num_experts, marker=".", label=f"{name} (synthetic)")
b.set_xlabel("tokens verified per step (tree size, root included)")
b.set_ylabel("fraction of a layer's experts read")
b.set_title("synthetic traces of the catalogue shapes (illustration)")
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
