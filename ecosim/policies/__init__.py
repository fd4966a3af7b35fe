"""Selection policies: which subtree of each recorded candidate tree a step verifies.

A selection is a boolean mask over node rows: the root plus an ancestor-closed set of at most
`budget` other nodes per tree. One module per policy (ar.py, confidence.py, ecospec.py), each with
its registry entry; registry.py lists them, base.py says what an entry is, spec.py is the
`PolicySpec` (a policy and its knob values) that engines and sweeps take. The `oracle` bound is
not a selection (it needs the verdicts): it lives in oracle.py, with an entry here saying so.
"""

from ecosim.policies import registry
from ecosim.policies.ar import select_ar
from ecosim.policies.base import Context, Knob, Policy
from ecosim.policies.confidence import confidence_rank, rank_by_sorts, select_confidence
from ecosim.policies.ecospec import Score, ecospec_offsets, ecospec_order, select_ecospec
from ecosim.policies.spec import PolicySpec

__all__ = [
    "Context", "Knob", "Policy", "PolicySpec", "Score", "confidence_rank", "ecospec_offsets", "ecospec_order",
    "rank_by_sorts", "registry", "select_ar", "select_confidence", "select_ecospec",
]
