"""`validate calibrate`: measure this hardware the way ecosim's cost model prices a step.

The cost model (ecosim/cost/, full mode, one device) prices a verification step of n tokens
whose routed experts have union u_l in MoE layer l, after a context of c tokens, as

    t = sum_l comb(u_l * expert_bytes / bw, 2 n k expert_params / peak)
      + comb(dense_bytes / bw, 2 n dense_params / peak) + (c + n) kv_bytes / bw + overhead

(comb = + under overlap "sum", max under "max"), plus `draft_time` per speculative step. The four
unknowns (bw, peak, overhead, draft_time) are measured here from the model's own forwards, as
Vidur profiles its operators:

- verify: the live verification phase (decode.verify_subtree + keep_path, the same functions the
  decoder times) over n tokens after a context of c tokens (a window of the prompts and their
  continuations when given, random tokens otherwise), with the routing *forced* by a router hook
  (bench.py). Two designs:
  * trace (`--trace`, and always in `validate run`): subtrees of the recorded trees, cut by four
    growth rules (confidence order, random, fewest new experts first, most new experts first) at
    every n in `tokens` (`levels` single roots at n = 1), each with its recorded tree and routing,
    so the tokens per expert follow decoding's own distribution (trace_design);
  * grid (no trace): per layer a random set of u experts dealt round-robin over the n x k slots,
    n in `tokens` and u at up to `levels` values over [k, min(E, n k)], so tokens and union vary
    independently (grid_design).
  Every case runs `repeats` times at every c in `contexts`, in shuffled order; each case's median
  is fitted.
- draft: the live draft phase: expand the tree (depth, topk, max_nodes) with r accepted tokens fed
  in its first forward (r = 0..3 in turn; decode.draft_tree), select with `confidence` at
  `budget` on the live trace. One draft step runs before every verify run of more than one token,
  as speculative decoding alternates them (each phase then finds the caches as the other left
  them); one-token verify runs follow each other, as in plain decoding. The drafts' median is
  `draft_time_s`. (ecospec's selection costs more than confidence's; the difference is not in the
  profile, and `validate run` reports every policy's measured selection time.)

Fit: least squares weighted by 1/t (relative errors), non-negative coefficients. "sum" is linear
in [bytes, flops, 1] and solved exactly over every subset of active coefficients; "max" is fitted
by a log-grid search over (bw, peak), refined twice, with the overhead in closed form. The profile
is a JSON file of `ecosim.catalog.devices.Device` fields (efficiencies 1.0: the fitted numbers are
already effective) plus a `calibration` object: the design, the fit's residuals, versions.
`ecosim replay --hardware profile.json` reads it.

What `validate calibrate` prints, defined:
- bandwidth (hbm_bw): bytes per second at which a step's bytes (union x expert_bytes + dense_bytes
  + KV of context and tokens) are read; "not measurable" when time does not grow with them;
- compute (peak_bf16 = peak_fp8): FLOP/s of the per-token work (2 FLOPs per active parameter);
- overhead (step_overhead_s): fixed seconds per verification step;
- draft (draft_time_s): median seconds of a draft step (module docstring);
- rms error, worst: root mean square and maximum of (cost model - measured median) / measured
  median over the verify cases the fit was made on.
"""

from validate.calibrate.config import CalibConfig
from validate.calibrate.design import STRATEGIES, Case, deal, grid_design, trace_design, union_levels
from validate.calibrate.fit import HUGE, MEASURABLE, Fit, device_of, fit, predict
from validate.calibrate.host import cpu_name, memory_bytes
from validate.calibrate.profile import profile
from validate.calibrate.timing import Bench, Calibration, Samples, measure

__all__ = [
    "HUGE", "MEASURABLE", "STRATEGIES", "Bench", "CalibConfig", "Calibration", "Case", "Fit", "Samples", "cpu_name",
    "deal", "device_of", "fit", "grid_design", "measure", "memory_bytes", "predict", "profile", "trace_design",
    "union_levels",
]
