"""Byte ranges (``tandv_tb.filesystems.ranges``): gathered by numpy indexing for small inputs
and by the compiled loop (``tandv_tb.filesystems.numba_loops``) for large ones, the same bytes."""

from __future__ import annotations

import numpy as np
import pytest

from tandv_tb.filesystems import ranges
from tandv_tb.filesystems.ranges import gather_ranges


@pytest.mark.parametrize("total", [1000, ranges.SMALL_BYTES + 1000])
def test_gather_ranges_both_ways(total):
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, total + 5000, dtype=np.uint8)
    sizes = rng.integers(0, 2 * total // 50, 50)
    sizes[-1] = max(total - sizes[:-1].sum(), 0)
    starts = rng.integers(0, len(data) - sizes.max(), len(sizes))
    expected = np.concatenate([data[s : s + n] for s, n in zip(starts, sizes)])
    assert np.array_equal(gather_ranges(data, starts, sizes), expected)
    out = np.zeros(len(expected) + 10, np.uint8)
    out_starts = 10 + np.concatenate(([0], np.cumsum(sizes)[:-1]))
    gather_ranges(data, starts, sizes, out=out, out_starts=out_starts)
    assert np.array_equal(out[10:], expected) and not out[:10].any()
