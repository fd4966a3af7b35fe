"""Expert sets as bitsets: one uint64 word per 64 experts, per node and MoE layer.

The union of experts a step reads is an OR over its nodes' bitsets, and its size a popcount,
so a whole trace's unions are a few vectorised passes over packed words instead of sets.
"""

from __future__ import annotations

import numpy as np
from numba import njit

WORD = 64


def n_words(num_experts: int) -> int:
    return (num_experts + WORD - 1) // WORD


def pack(experts: np.ndarray, num_experts: int) -> np.ndarray:
    """(rows, layers, k) expert ids (-1 = none) -> (rows, layers, words) uint64 bitsets."""
    return pack_groups(experts, np.arange(len(experts)), len(experts), num_experts)


def pack_groups(experts: np.ndarray, group: np.ndarray, n_groups: int, num_experts: int,
                rows: np.ndarray | None = None) -> np.ndarray:
    """(n_groups, layers, words): the OR over the rows of each group of their expert bitsets.

    `experts` is (rows, layers, k) expert ids (-1 = none), or read at `rows` when given (so no
    copy of the selected rows is made); `group` (one per row used) says which union each row joins.
    One compiled pass sets each id's bit in its group's words (expert e is bit e % 64 of word
    e // 64): the work is one read of the rows' ids, like the numpy pass a replay is measured
    against, with no index arrays or scratch tables in between.
    """
    out = np.zeros((n_groups, experts.shape[1], n_words(num_experts)), dtype=np.uint64)
    if len(group) == 0 or n_groups == 0:
        return out
    which = np.arange(len(group), dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
    top = _or_rows(experts, which, np.asarray(group, dtype=np.int64), out)
    if top >= out.shape[2] * WORD:
        raise ValueError(f"expert id {top} out of range for {num_experts} experts")
    return out


@njit(cache=True)
def _or_rows(experts, rows, group, out):
    """out[group[i]] |= bits of experts[rows[i]]; returns the largest id seen (-1 when none); ids
    past the words are not set."""
    top = -1
    span = out.shape[2] * WORD
    for i in range(len(rows)):
        r, g = rows[i], group[i]
        for l in range(experts.shape[1]):
            for j in range(experts.shape[2]):
                e = np.int64(experts[r, l, j])
                if e >= 0:
                    top = max(top, e)
                    if e < span:
                        out[g, l, e >> 6] |= np.uint64(1) << np.uint64(e & 63)
    return top


def count(bits: np.ndarray) -> np.ndarray:
    """Set sizes over the last (word) axis."""
    return _sum_words(np.bitwise_count(bits))


def _sum_words(c: np.ndarray) -> np.ndarray:
    """(..., words) per-word popcounts -> (..., ) int64 totals. A few words (up to 512 experts) are
    added word by word: numpy's reduction over a short last axis costs about six times as much."""
    if c.shape[-1] > 8:
        return c.sum(axis=-1, dtype=np.int64)
    out = c[..., 0].astype(np.int64)
    for w in range(1, c.shape[-1]):
        out += c[..., w]
    return out


def device_masks(num_experts: int, devices: int) -> np.ndarray:
    """(devices, words) masks of the experts each device holds under expert parallelism.

    The mapping is contiguous blocks, as DeepEP / SGLang / vLLM place experts: device d holds
    experts [d*E/N, (d+1)*E/N) (the first E mod N devices take one more when N does not divide E).
    """
    owner = device_of_expert(num_experts, devices)
    masks = np.zeros((devices, n_words(num_experts)), dtype=np.uint64)
    for e in range(num_experts):
        masks[owner[e], e >> 6] |= np.uint64(1) << np.uint64(e & 63)
    return masks


def device_of_expert(num_experts: int, devices: int) -> np.ndarray:
    return np.repeat(np.arange(devices), [len(b) for b in np.array_split(np.arange(num_experts), devices)])


def count_per_device(bits: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """(..., words) bitsets -> (..., devices) set sizes on each device."""
    out = np.empty((*bits.shape[:-1], len(masks)), dtype=np.int64)
    for d, mask in enumerate(masks):  # one device at a time: no (..., devices, words) temporary
        out[..., d] = _sum_words(np.bitwise_count(bits & mask))
    return out


def unpack(bits: np.ndarray, num_experts: int) -> np.ndarray:
    """(..., words) -> (..., num_experts) bool."""
    as_bytes = bits.astype("<u8").view(np.uint8).reshape(*bits.shape[:-1], -1)
    return np.unpackbits(as_bytes, axis=-1, bitorder="little")[..., :num_experts].astype(bool)
