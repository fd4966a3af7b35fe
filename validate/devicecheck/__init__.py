"""`validate device-check`: the GPU half of EcoSim in one unattended command, inside a time budget.

    validate device-check --device cuda --out DIR            # a lent GPU: real per-layer sizes
    validate device-check --device cpu --small --out DIR     # the machinery, tiny models (the tests)

Phases, each timed, each writing its figures into DIR/summary.json and DIR/summary.md (summary.py
defines every figure) as it ends; a failed phase is recorded with one line and skips the phases of
that target that need it; the command exits 0 when every phase passed, 1 otherwise, 2 when the
environment lacks something (phase 1: one line, nothing installed):

1. environment (environment.py): torch, transformers, the device, its free memory;
2. build (targets.py): per catalogue model, a target with its real per-layer sizes, few layers and
   random weights, saved and loaded as a real checkpoint, with a tiny draft; a probe of one step
   sizes the later phases to the budget (plan.py);
3. record and recompute (phases.py): `tracer record` on the device, the trace format check, and a
   sample of nodes recomputed by plain decoding (tree verification must equal it);
4. calibrate (phases.py, graphs.py): `validate calibrate` on the trace, and one verify step's time
   against tokens and distinct experts, eager and replayed from a CUDA graph;
5. run (phases.py): `validate run` with the self-tuning `ecospec-auto`, `ar` and `confidence` on
   the trace and that profile: lossless check, measured against simulated ms per token.
"""

from validate.devicecheck.check import run_check
from validate.devicecheck.config import CheckConfig

__all__ = ["CheckConfig", "run_check"]
