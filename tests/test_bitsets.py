"""bitsets.pack_groups by hand: rows read in place, groups in any order, pads skipped, bad ids refused."""

import numpy as np
import pytest

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
