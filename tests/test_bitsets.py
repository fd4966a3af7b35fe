"""bitsets.pack_groups by hand and against its numpy definition: rows read in place, groups in any order, pads
skipped, bad ids refused."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ecosim.bitsets import pack_groups


def test_pack_groups_ors_the_chosen_rows_into_their_groups():
    # 4 rows x 2 layers x 2 ids over 70 experts (two words); rows 3 and 0 go to group 1, row 2 to 0
    experts = np.array([[[0, 65], [1, -1]],
                        [[5, 6], [7, 8]],  # never read
                        [[63, -1], [64, 69]],
                        [[0, 2], [-1, -1]]], dtype=np.int16)
    out = pack_groups(experts, np.array([1, 0, 1]), 2, 70, rows=np.array([3, 2, 0]))
    one = np.uint64(1)
    assert out.shape == (2, 2, 2) and out.dtype == np.uint64
    assert out[0, 0].tolist() == [int(one << np.uint64(63)), 0]
    assert out[0, 1].tolist() == [0, int((one << np.uint64(0)) | (one << np.uint64(5)))]  # 64, 69
    assert out[1, 0].tolist() == [int(one | (one << np.uint64(2))), int(one << np.uint64(1))]  # 0, 2 | 65
    assert out[1, 1].tolist() == [int(one << np.uint64(1)), 0]  # 1
    assert pack_groups(experts, np.zeros(0, dtype=np.int64), 3, 70).shape == (3, 2, 2)


def test_pack_groups_refuses_an_id_past_the_experts_words():
    with pytest.raises(ValueError, match="expert id 200 out of range for 70 experts"):
        pack_groups(np.array([[[1, 200]]], dtype=np.int16), np.array([0]), 1, 70)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**16), st.integers(1, 200), st.sampled_from([8, 64, 70, 128, 256]), st.integers(1, 8),
       st.integers(1, 12), st.booleans())
def test_long_and_short_runs_of_a_group_pack_as_the_numpy_definition(seed, n, experts_n, k, groups, sorted_groups):
    """A step's rows come as one run of its group (long: marked a byte per expert, then packed; short:
    OR-ed straight in); any order of groups, pads and repeated rows give the numpy definition's bits."""
    rng = np.random.default_rng(seed)
    layers = 3
    ex = rng.integers(-1, experts_n, (n, layers, k)).astype(np.int16)
    rows = rng.integers(0, n, rng.integers(1, 3 * n))
    group = rng.integers(0, groups, len(rows))
    if sorted_groups:
        group = np.sort(group)  # long runs: the byte-marking path
    want = np.zeros((groups, layers, (experts_n + 63) // 64), dtype=np.uint64)
    for r, g in zip(rows, group):
        for layer in range(layers):
            for e in ex[r, layer]:
                if e >= 0:
                    want[g, layer, e // 64] |= np.uint64(1) << np.uint64(e % 64)
    assert np.array_equal(pack_groups(ex, group, groups, experts_n, rows=rows), want)
