"""EcoSim: trace-driven simulation of cost-aware speculative decoding on MoE models.

This package never imports torch or transformers: a laptop with a trace directory needs only it.

`ecosim.replay(...)` and `ecosim.sweep(...)` are the Python API (api.py). The modules of the same
names stay importable as always (`from ecosim.replay import TraceReplay`).
"""

from ecosim.version import __version__  # noqa: I001  (first: modules below read it)
from ecosim.api import replay, sweep  # the Python API (api.py); shadows the modules' names on the package
from ecosim.api import compare_predictors, devices, model_shape, placement_of, predictor_tables, step_times, unions

__all__ = ["__version__", "compare_predictors", "devices", "model_shape", "placement_of", "predictor_tables", "replay",
           "step_times", "sweep", "unions"]
