"""Expert sets as bitsets: one uint64 word per 64 experts, per node and MoE layer.

The union of experts a step reads is an OR over its nodes' bitsets, and its size a popcount,
so a whole trace's unions are a few vectorised passes over packed words instead of sets.
"""

from __future__ import annotations

import numpy as np

WORD = 64


def n_words(num_experts: int) -> int:
    return (num_experts + WORD - 1) // WORD


def pack(experts: np.ndarray, num_experts: int) -> np.ndarray:
    """(rows, layers, k) expert ids (-1 = none) -> (rows, layers, words) uint64 bitsets."""
    return pack_groups(experts, np.arange(len(experts)), len(experts), num_experts)


def pack_groups(experts: np.ndarray, group: np.ndarray, n_groups: int, num_experts: int,
                rows: np.ndarray | None = None, chunk_bytes: int = 1 << 19) -> np.ndarray:
    """(n_groups, layers, words): the OR over the rows of each group of their expert bitsets.

    `experts` is (rows, layers, k) expert ids (-1 = none), or read at `rows` when given (so no
    copy of the selected rows is made); `group` (one per row used) is non-decreasing in
    [0, n_groups). Ids are set as bytes in a small scratch table (one byte per expert and layer,
    for a chunk of groups), then `np.packbits` turns each layer's bytes into its words
    (little-endian bit order: expert e is bit e % 64 of word e // 64). A union is packed once per
    group, not once per row and then OR-ed.
    """
    layers = experts.shape[1]
    words = n_words(num_experts)
    span = words * WORD
    per_group = layers * span
    out = np.zeros((n_groups, layers, words), dtype=np.uint64)
    if len(group) == 0 or n_groups == 0:
        return out
    step = max(1, chunk_bytes // per_group)
    table = np.zeros(step * per_group + 1, dtype=bool)  # the last byte takes the -1 pads
    lane = (np.arange(layers, dtype=np.int64) * span)[None, :, None]
    bounds = np.searchsorted(group, np.arange(0, n_groups + step, step))
    for c, g0 in enumerate(range(0, n_groups, step)):
        a, b = bounds[c], bounds[c + 1]
        if a == b:
            continue
        e = experts[a:b] if rows is None else experts[rows[a:b]]
        idx = ((group[a:b] - g0) * per_group)[:, None, None] + lane + e
        if e.max() >= span:
            raise ValueError(f"expert id {int(e.max())} out of range for {num_experts} experts")
        if e.min() < 0:
            idx[e < 0] = step * per_group
        table[idx] = True
        n = min(step, n_groups - g0)
        packed = np.packbits(table[: n * per_group].reshape(n, layers, span), axis=-1, bitorder="little")
        out[g0 : g0 + n] = packed.view("<u8")
        table[:] = False
    return out


def count(bits: np.ndarray) -> np.ndarray:
    """Set sizes over the last (word) axis."""
    return np.bitwise_count(bits).sum(axis=-1, dtype=np.int64)


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
        out[..., d] = np.bitwise_count(bits & mask).sum(axis=-1, dtype=np.int64)
    return out


def unpack(bits: np.ndarray, num_experts: int) -> np.ndarray:
    """(..., words) -> (..., num_experts) bool."""
    as_bytes = bits.astype("<u8").view(np.uint8).reshape(*bits.shape[:-1], -1)
    return np.unpackbits(as_bytes, axis=-1, bitorder="little")[..., :num_experts].astype(bool)
