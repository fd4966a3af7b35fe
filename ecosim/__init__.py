"""EcoSim: trace-driven simulation of cost-aware speculative decoding on MoE models.

This package never imports torch or transformers: a laptop with a trace directory needs only it.
"""

from ecosim.version import __version__

__all__ = ["__version__"]
