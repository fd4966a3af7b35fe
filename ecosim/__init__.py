"""EcoSim: trace-driven simulation of cost-aware speculative decoding on MoE models.

This package never imports torch or transformers: a laptop with a trace directory needs only it.
"""

__version__ = "0.1.0"
