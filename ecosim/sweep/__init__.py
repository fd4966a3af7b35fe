"""Sweeps: every configuration of a grid replayed with the fast engine, resumable, local or on Ray.

    grid.py       the axes, the Cartesian product, configuration ids, tasks (one selection each)
    tasks.py      what a worker runs: select once, price every hardware/bandwidth/placement variant
    executors.py  a local process pool or Ray, yielding finished tasks
    results.py    DIR/parts/*.parquet (atomic, per task) -> DIR/results.parquet (ratios filled in)
    winner.py     DIR/winner.json: the best configuration per pricing (schema in its docstring)
    pareto.py     the front of time per token against experts per step
    runner.py     run_sweep(): plan, skip what parts/ holds, run the rest, consolidate, choose
"""

from ecosim.sweep.grid import Config, Grid, Pricing, Selection, Settings, Task, TraceRef
from ecosim.sweep.runner import Outcome, run_sweep

__all__ = ["Config", "Grid", "Outcome", "Pricing", "Selection", "Settings", "Task", "TraceRef", "run_sweep"]
