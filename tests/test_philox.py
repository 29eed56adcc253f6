"""Philox as FlashAttention-2's dropout keys it (simulator.numerics.philox).

The round function is checked against Random123's published known-answer vectors for
Philox4x32-10 (``kat_vectors`` of the Random123 distribution, D. E. Shaw Research): the same
round and key schedule with ten rounds. FlashAttention-2's seven rounds, the keying and the mask
layout are checked against the device's recorded debug masks in tests/test_sdpa_recordings.py.
"""

import numpy as np
import pytest

from simulator.numerics import philox

ONES64 = (1 << 64) - 1


@pytest.mark.parametrize("key, ctr, want", [
    ((0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((ONES64, ONES64), (ONES64, ONES64), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
])
def test_philox4x32_10_known_answers(key, ctr, want):
    got = philox.philox4x32(key[0], ctr[0], ctr[1], rounds=10)
    assert got.dtype == np.uint32
    assert tuple(int(x) for x in got) == want


def test_seven_rounds_are_not_ten():
    seven = philox.philox4x32(1, 2, 3)
    assert philox.ROUNDS == 7
    assert not np.array_equal(seven, philox.philox4x32(1, 2, 3, rounds=10))


def test_vectorised_equals_scalar_calls():
    offs = np.array([0, 5, 1 << 40], np.uint64)
    subs = np.array([[7], [(3 << 32) | 9]], np.uint64)
    grid = philox.philox4x32(99, offs[None, :], subs)
    for i in range(2):
        for j in range(3):
            assert np.array_equal(grid[i, j], philox.philox4x32(99, int(offs[j]), int(subs[i, 0])))


def test_block_positions_cover_the_block_once():
    row, col = philox.block_positions()
    assert row.shape == col.shape == (32, 16)
    cells = set(zip(row.ravel().tolist(), col.ravel().tolist(), strict=True))
    assert cells == {(r, c) for r in range(16) for c in range(32)}


@pytest.mark.parametrize("p, want", [(0.0, 255), (0.1, 229), (0.5, 127), (0.9, 25), (0.999, 0)])
def test_keep_threshold(p, want):
    # uint8(floor(float32(1 - p) * 255.0)): 0.9f * 255 = 229.49..., 0.1f * 255 = 25.50...
    assert philox.keep_threshold(p) == want


def test_keep_mask_is_positional():
    """The mask of a sub-range is the crop of a larger call's (the keying names positions)."""
    big = philox.dropout_keep(5, 64, 2, 3, 50, 90, 0.3)
    small = philox.dropout_keep(5, 64, 2, 3, 17, 33, 0.3)
    assert np.array_equal(big[..., :17, :33], small)
    assert 0.6 < big.mean() < 0.8
