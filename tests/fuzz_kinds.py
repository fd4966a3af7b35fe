"""Every mutation kind of the reader fuzzers, in one ordered table, and `make_case`: case i is kind
i mod len(KINDS), mutated by a generator seeded with (SEED, i) from one of two base traces (with and without
gates), so any case can be made again by its number alone.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

import fuzz_kinds_manifest
import fuzz_kinds_parquet
from fuzz_traces import Base, Case

SEED = 20261210

KINDS: dict[str, Callable[[np.random.Generator, Base], Case]] = {
    name.removeprefix("k_"): fn
    for module in (fuzz_kinds_parquet, fuzz_kinds_manifest)  # in this order: a case's number picks its kind
    for name, fn in list(vars(module).items()) if name.startswith("k_") and callable(fn)
}


_BASES: dict[bool, Base] = {}


def make_case(i: int) -> tuple[str, Case]:
    kind = list(KINDS)[i % len(KINDS)]
    rng = np.random.default_rng([SEED, i])
    gates = bool(rng.random() < 0.5)
    if gates not in _BASES:
        _BASES[gates] = Base(11, gates)
    return kind, KINDS[kind](rng, _BASES[gates])
