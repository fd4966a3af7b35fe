"""The README's picture of step time against tokens with experts in host memory (simulated against published):

    python -m bench.host_figure docs/host_step_time.png

Published: ik_llama.cpp issue 1630's GLM-4.5-Air IQ1_KT forwards of n = 1..8 tokens (llama-bench pp256 with
n_ubatch = n, its main branch's GEMM path) and PR 1707's fused small-batch path at n = 2, as the step time of n
tokens over one's (published.json). Simulated: the same rows priced by `ecosim fidelity` (synthetic traces of
each shape routed by its calibrated preset), and DeepSeek-V3.1 at q4_k_m with its experts on two Xeon Gold 6454S
sockets beside a 4090 D (cpu-moe) under the two fitted engine profiles, which no published curve covers yet.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

from ecosim import fidelity as f
from ecosim.catalog.serving import load_serving

TOKENS = (1, 2, 3, 4, 6, 8)


def curve(template: dict, profile: str) -> list[float]:
    """Simulated step-time ratios at TOKENS for a step_ratio row's setting under `profile`."""
    base = load_serving(profile)
    out = []
    for n in TOKENS:
        row = copy.deepcopy(template)
        row["sim"]["tokens"] = n
        out.append(1.0 if n == 1 else f.predict(row, f.price_row(row, base, f.HOST_FREE), f.np.array([base.step_fixed_s, base.kernel_latency_s, base.host_layer_s])))
    return out


def main(out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = {r["id"]: r for r in f.load_rows()}
    glm = rows["ik1630-glm45air-n2"]
    ds = copy.deepcopy(glm)
    ds["sim"] = {"model": "deepseek-v3.1", "dtype": "q4_k_m", "hardware": "rtx4090d", "placement": "cpu-moe",
                 "host": "xeon-6454s-2s", "context": 500, "profile": "ktransformers", "tokens": 2}
    fig, ax = plt.subplots(figsize=(7, 4.5))
    pub = [1.0] + [rows[f"ik1630-glm45air-n{n}"]["value"] for n in TOKENS[1:]]
    ax.plot(TOKENS, pub, "o-", color="tab:red", label="published: ik_llama.cpp main, GLM-4.5-Air, 2x3090 (ik_llama.cpp issue 1630)")
    ax.plot([2], [rows["ik1707-glm45air-n2"]["value"]], "s", color="tab:orange", ms=8,
            label="published: ik_llama.cpp PR 1707 fused small batch, n=2")
    ax.plot(TOKENS, curve(glm, "ik_llama.cpp"), "o--", color="tab:blue", label="simulated: the same setting (ik_llama.cpp profile)")
    for prof, color in (("ktransformers", "tab:green"), ("ik_llama.cpp", "tab:purple")):
        ax.plot(TOKENS, curve(ds, prof), "^:", color=color,
                label=f"simulated: DeepSeek-V3.1 q4_k_m, cpu-moe on 2x Xeon 6454S + 4090 D ({prof})")
    ax.plot(TOKENS, TOKENS, color="grey", lw=0.8, label="n tokens cost n steps")
    ax.set_xlabel("tokens in one forward (verified tokens)")
    ax.set_ylabel("step time / one token's step time")
    ax.set_title("Step time against tokens, experts in host memory (synthetic routing)", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/host_step_time.png"))
