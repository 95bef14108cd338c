"""``read_frame(format=F)`` for a block-scaled format F, from records NumericsWriter wrote."""

from __future__ import annotations

import numpy as np
import pytest

import tandv_tb
from tandv_tb import NumericsWriter, read_frame
from tandv_tb.stats import tensor_stats

NEG_INF, POS_INF = float("-inf"), float("inf")


def _values(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((4, 64)) * 2.0 ** rng.integers(-12, 12, (4, 64))
    values[0, :3] = [0.0, np.inf, np.nan]
    return values.astype(np.float32)


@pytest.fixture
def logdir(tmp_path):
    with NumericsWriter(tmp_path, formats=("mxfp4_e2m1", "mxfp4_e2m1:rceil")) as writer:
        for step in range(3):
            writer.add_numerics("w", _values(step), step, tensor_type="Weight")
    return tmp_path


@pytest.mark.parametrize("name", ["mxfp4_e2m1", "mxfp4_e2m1:rceil"])
def test_block_format_view_moves_underflow_and_overflow_and_keeps_the_bins(logdir, name):
    plain = read_frame(logdir)
    frame = read_frame(logdir, format=name)
    tandv_tb.validate(frame)
    counts = frame["exponent_counts"]
    assert list(counts.columns) == list(plain["exponent_counts"].columns)  # not clamped
    for step in range(3):
        block = tensor_stats(_values(step), (name,)).to_record().blocks[name]
        row = counts.iloc[step]
        assert row[NEG_INF] == 1 + block.underflow  # the zero, and the values lost
        assert row[POS_INF] == block.overflow + 1  # and the infinity
        assert row.sum() == 4 * 64 - 1  # every value but the NaN
    # The two scale rules are recorded apart: the round-up one never saturates.
    assert counts[POS_INF].tolist() == [1, 1, 1] or name == "mxfp4_e2m1"


def test_a_block_format_that_was_not_recorded_raises_and_says_what_to_do(logdir):
    with pytest.raises(ValueError, match=r"not recorded.*formats="):
        read_frame(logdir, format="nvfp4")
    with pytest.raises(ValueError, match="block format"):
        read_frame(logdir, format="nvfp4:rceil")
