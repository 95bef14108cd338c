"""A record seen through a low-precision format: the ``format=F`` view of ``read_frame``.

For a format that was not recorded at tracking time the split is an estimate, by the rule of
``tandv_tb.formats.estimate`` (the dashboards' too), rounded to whole values. A block-scaled
format cannot be estimated: what a value loses depends on its block, and the blocks are
gone (``block_split``).
"""

from __future__ import annotations

import numpy as np

from tandv_tb import formats as fmt
from tandv_tb.event_files.record import NumericsRecord
from tandv_tb.formats.estimate import bin_weights


def _take_from_bottom(counts: np.ndarray, amount: int) -> np.ndarray:
    """``counts`` less ``amount`` values taken from its lowest entries up."""
    before = np.cumsum(counts) - counts
    return counts - np.clip(amount - before, 0, counts)


def _estimated_casts(record: NumericsRecord, format: str) -> tuple[int, int]:
    """Under/overflow of ``format`` estimated from the record's bins (``formats.estimate``)."""
    under_part, over_part = bin_weights(record.dtype, format)
    first = record.bins_lo - fmt.info(record.dtype).min_exponent
    span = slice(first, first + len(record.counts))
    under_count = float(record.counts @ under_part[span])
    over_count = float(record.counts @ over_part[span])
    return int(round(under_count)), int(round(over_count))


class BlockFormatNotRecorded(ValueError):
    """A block-scaled format asked of records that did not record it."""


def block_split(record: NumericsRecord, format: str) -> tuple[int, np.ndarray, int]:
    """``(low, counts, high)``: the record seen through the block format ``format``.

    ``counts[i]`` is bin ``record.bins_lo + i`` (the tensor's own bins, not clamped) less
    the values that underflow or overflow, taken from the lowest and the highest bins as
    in ``format_split`` (the counts are exact; which bins they leave is not recorded);
    ``low`` holds the zeros plus the underflow, ``high`` the overflow plus the infinities.
    ``BlockFormatNotRecorded`` where the record lacks ``format``.
    """
    block = record.blocks.get(format)
    if block is None:
        raise BlockFormatNotRecorded(format)
    counts = np.asarray(record.counts, dtype=np.int64)
    kept = _take_from_bottom(counts, min(block.underflow, int(counts.sum())))
    over = min(block.overflow, int(kept.sum()))
    kept = _take_from_bottom(kept[::-1], over)[::-1]
    low = record.zero_count + block.underflow
    return low, kept, over + record.posinf_count + record.neginf_count


def format_split(record: NumericsRecord, format: str) -> tuple[int, np.ndarray, int, bool]:
    """``(low, counts, high, exact)``: the record seen through ``format`` F.

    ``counts[i]`` is the number of values in bin ``info(F).min_exponent + i`` once clamped
    into F's range; ``low`` holds the zeros plus the underflow, ``high`` the overflow plus the
    infinities. ``exact`` is False where F was not recorded and the casts were estimated.
    The underflow is taken from the lowest bins and the overflow from the highest, which is
    exact for every format whose casts are symmetric in sign and keep zero (all but
    ``float8_e8m0fnu``, where zeros and negative values become NaN).
    """
    target = fmt.info(format)
    counts = np.asarray(record.counts, dtype=np.int64)
    exact = target.name in record.underflow
    if exact:
        under, over = record.underflow[target.name], record.overflow[target.name]
    else:
        under, over = _estimated_casts(record, target.name)
    nonzero = int(counts.sum())
    under = min(under, nonzero)
    kept = _take_from_bottom(counts, under)
    over_from_bins = min(over, int(kept.sum()))
    kept = _take_from_bottom(kept[::-1], over_from_bins)[::-1]
    over_from_zeros = min(over - over_from_bins, record.zero_count)  # e.g. float8_e8m0fnu
    bins = np.zeros(target.n_bins, dtype=np.int64)
    if len(kept):
        where = (
            np.clip(record.bins_lo + np.arange(len(kept)), target.min_exponent, target.max_exponent)
            - target.min_exponent
        )
        np.add.at(bins, where, kept)
    low = record.zero_count - over_from_zeros + under
    high = over_from_bins + over_from_zeros + record.posinf_count + record.neginf_count
    return low, bins, high, exact
