"""Expert sets as bitsets: one uint64 word per 64 experts, per node and MoE layer.

The union of experts a step reads is an OR over its nodes' bitsets, and its size a popcount,
so a whole trace's unions are a few vectorised passes over packed words instead of sets.
"""

from __future__ import annotations

import numpy as np

WORD = 64


def n_words(num_experts: int) -> int:
    return (num_experts + WORD - 1) // WORD


def pack(experts: np.ndarray, num_experts: int, chunk: int = 1 << 15) -> np.ndarray:
    """(rows, layers, k) expert ids (-1 = none) -> (rows, layers, words) uint64 bitsets."""
    rows, layers, k = experts.shape
    out = np.zeros((rows, layers, n_words(num_experts)), dtype=np.uint64)
    r_idx = np.arange(min(chunk, rows))[:, None]
    l_idx = np.arange(layers)[None, :]
    for a in range(0, rows, chunk):
        e = experts[a : a + chunk].astype(np.int64)
        block = out[a : a + chunk]
        r = r_idx[: len(e)]
        for s in range(k):
            ids = e[:, :, s]
            valid = ids >= 0
            word = np.where(valid, ids >> 6, 0)
            bit = np.where(valid, np.left_shift(np.uint64(1), (ids & 63).astype(np.uint64)), np.uint64(0))
            # Within one slot each (row, layer) appears once, so fancy `|=` does not lose updates.
            block[r, l_idx, word] |= bit.astype(np.uint64)
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
    return np.bitwise_count(bits[..., None, :] & masks).sum(axis=-1, dtype=np.int64)


def unpack(bits: np.ndarray, num_experts: int) -> np.ndarray:
    """(..., words) -> (..., num_experts) bool."""
    as_bytes = bits.astype("<u8").view(np.uint8).reshape(*bits.shape[:-1], -1)
    return np.unpackbits(as_bytes, axis=-1, bitorder="little")[..., :num_experts].astype(bool)
