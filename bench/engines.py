"""The simpy engine against the fast engine on the same no-contention case, and the ratio.

    python bench/engines.py [--model qwen3-30b-a3b] [--positions 400]

One synthetic trace (labelled synthetic), one request at a time, `hbm`: the case where the two
engines must agree to 1e-9 (checked here again). Reports the wall seconds of each and how many
times slower the event engine is. Not a test: the timings depend on the machine.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from ecosim.catalog import get_device, get_model
from ecosim.cost import CostConfig
from ecosim.des import des_run
from ecosim.placement import Placement
from ecosim.policies import PolicySpec
from ecosim.replay import TraceReplay
from ecosim.simulate import cost_model
from ecosim.synth import SynthConfig, write_synthetic
from ecosim.trace.io import read_trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen3-30b-a3b")
    ap.add_argument("--positions", type=int, default=400)
    args = ap.parse_args()
    path = write_synthetic(Path(tempfile.mkdtemp()) / "t", get_model(args.model),
                           SynthConfig(requests=2, positions=args.positions, max_nodes=32, seed=0))
    trace = read_trace(path)
    cost = cost_model(trace, get_device("h200"), Placement(), CostConfig())
    print(f"synthetic {args.model} trace, {trace.n_trees} positions; engine seconds (selection cached, pricing only)")
    for spec in (PolicySpec("ar"), PolicySpec("confidence", 16), PolicySpec("ecospec", 16, 0.5, "oracle")):
        replay = TraceReplay(trace)
        replay.steps(spec)  # both engines share the cached selection and walk; time the engines alone
        t0 = time.perf_counter()
        fast = replay.run(spec, cost)
        t1 = time.perf_counter()
        des = des_run(replay, spec, cost).row
        t2 = time.perf_counter()
        agree = abs(des.time_s - fast.time_s) / fast.time_s
        print(f"  {spec.label():<28} fast {t1 - t0:8.4f} s   des {t2 - t1:8.4f} s   des/fast {(t2 - t1) / (t1 - t0):8.1f}x"
              f"   steps {fast.steps:5d}   |rel diff| {agree:.1e}")


if __name__ == "__main__":
    main()
