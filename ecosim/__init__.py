"""EcoSim: trace-driven simulation of cost-aware speculative decoding on MoE models.

This package never imports torch or transformers: a laptop with a trace directory needs only it.

`ecosim.replay(...)` and `ecosim.sweep(...)` are the Python API (api.py). The modules of the same
names stay importable as always (`from ecosim.replay import TraceReplay`). Besides api.py's
functions the package re-exports the public types and readers they take or return, so a notebook
needs nothing but `import ecosim` (tests/test_layers.py keeps reports/ to that).
"""

from ecosim.version import __version__  # noqa: I001  (first: modules below read it)
from ecosim.api import replay, sweep  # the Python API (api.py); shadows the modules' names on the package
from ecosim.api import (compare_predictors, devices, hosts, model_shape, paper_readings, placement_of, predictor_tables, published,
                        routing_stats,
                        scale_distinct, step_times, synthetic, unions)
from ecosim.policies import PolicySpec
from ecosim.routing.importers import import_routing
from ecosim.trace.io import Trace, find_traces, read_trace

__all__ = ["PolicySpec", "Trace", "__version__", "compare_predictors", "devices", "find_traces", "hosts", "import_routing",
           "model_shape", "paper_readings", "placement_of", "predictor_tables", "published", "read_trace", "replay", "routing_stats", "scale_distinct",
           "step_times", "sweep", "synthetic", "unions"]
