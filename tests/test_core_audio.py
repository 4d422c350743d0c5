"""Placing clips on a track (what the oracles speak): exact samples, overlaps added and clipped."""

import numpy as np

from server.core.audio import mix_placed


def test_mix_placed_windows_overlaps_and_clipping():
    a = np.array([1, 2, 3, 4, 5], dtype=np.int16)
    b = np.array([30_000, 30_000, -30_000], dtype=np.int16)
    items = [(2, a), (5, b)]
    assert mix_placed(items, 0, 4).tolist() == [0, 0, 1, 2]
    assert mix_placed(items, 4, 5).tolist() == [3, 4 + 30_000, 5 + 30_000, -30_000, 0]
    assert mix_placed([(0, b), (0, b)], 0, 3).tolist() == [32_767, 32_767, -32_768]  # clipped, not wrapped
    assert mix_placed(items, 100, 3).tolist() == [0, 0, 0] and mix_placed([], 0, 2).dtype == np.int16
