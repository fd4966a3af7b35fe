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
    """out[group[i]] |= bits of experts[rows[i]]; returns the largest id past the words (-1 when
    none), which are not set. (The largest of every id was a running max on each id's path: half
    the pass's time.)

    A run of rows joining one group (a step's selected nodes) that holds more slots per layer than
    half a layer's bits is marked in a byte per expert and packed once: a byte store per id with
    nothing to read back, where OR-ing each id into its word waits on that word's previous store
    (about twice as fast on a step of a hundred rows). A short run (a chain, plain decoding) ORs
    its ids directly: the packing would cost more than it saves."""
    top = -1
    L, K, W = experts.shape[1], experts.shape[2], out.shape[2]
    span = W * WORD
    seen = np.zeros((L, span), dtype=np.uint8)
    i, n = 0, len(rows)
    while i < n:
        g = group[i]
        j = i + 1
        while j < n and group[j] == g:
            j += 1
        long = (j - i) * K * 2 >= span  # a short run goes straight into the words
        for q in range(i, j):
            r = rows[q]
            for l in range(L):
                for s in range(K):
                    e = np.int64(experts[r, l, s])
                    if e >= span:
                        top = max(top, e)
                    elif e >= 0:
                        if long:
                            seen[l, e] = 1
                        else:
                            out[g, l, e >> 6] |= np.uint64(1) << np.uint64(e & 63)
        if long:
            for l in range(L):
                for w in range(W):
                    word = np.uint64(0)
                    for b in range(WORD):
                        word |= np.uint64(seen[l, w * WORD + b]) << np.uint64(b)
                    out[g, l, w] |= word
            seen[:] = 0
        i = j
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
