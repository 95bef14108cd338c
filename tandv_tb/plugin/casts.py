"""Under/overflow counts of a format for every step of a layer: exact or estimated.

A format recorded at tracking time is read as stored (exact). Casting to the tensor's own
dtype changes nothing (exactly 0 and 0). Any other format is estimated from the exponent
histogram with the one rule of ``tandv_tb.formats.estimate`` (which ``read_frame`` applies
too, so the dashboards and the frame give the same estimate), here as its per-bin weights
(``bin_weights``) applied to all steps at once.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tandv_tb import formats as fmt
from tandv_tb.event_files import metadata
from tandv_tb.formats.estimate import bin_weights
from tandv_tb.store.series import LayerSeries, StepColumns


@dataclasses.dataclass(frozen=True)
class CastCounts:
    """Per-step underflow and overflow counts of one format, and whether they are exact."""

    underflow: np.ndarray  # int64[S]
    overflow: np.ndarray  # int64[S]
    exact: bool


def cast_counts(series: StepColumns, format_name: fmt.Format) -> CastCounts:
    """Under/overflow of ``format_name`` at every step of ``series`` (a ``LayerGrid`` only
    for a format all its layers recorded: nothing to estimate)."""
    if format_name in series.formats:
        return CastCounts(*series.casts(format_name), True)
    underflow = np.zeros(len(series), dtype=np.int64)
    overflow = np.zeros(len(series), dtype=np.int64)
    exact = True
    for code in np.unique(series.dtype_codes):
        dtype = metadata.DTYPE_CODES[int(code)]
        if dtype == format_name:
            continue
        exact = False
        rows = np.flatnonzero(series.dtype_codes == code)
        under_weights, over_weights = bin_weights(dtype, format_name)
        underflow[rows] = _weighted_bin_sums(series, rows, under_weights, dtype)
        overflow[rows] = _weighted_bin_sums(series, rows, over_weights, dtype)
    return CastCounts(underflow, overflow, exact)


def _weighted_bin_sums(
    series: LayerSeries, rows: np.ndarray, weights: np.ndarray, dtype: str
) -> np.ndarray:
    """``rint(sum_i counts[i] * weights[n_i - lowest bin of dtype])`` for each row."""
    bins = series.bins
    if bins is None:
        raise KeyError(f"the bins of {series.name!r} were not read")
    lengths = bins.starts[rows + 1] - bins.starts[rows]
    within = _positions(lengths)
    index = np.repeat(bins.starts[rows], lengths) + within
    exponents = np.repeat(bins.lo[rows], lengths) + within
    weighted = bins.counts[index] * weights[exponents - fmt.info(dtype).min_exponent]
    sums = np.zeros(len(rows))
    filled = lengths > 0
    if filled.any():
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))[filled]
        sums[filled] = np.add.reduceat(weighted, starts)
    return np.rint(sums).astype(np.int64)


def _positions(lengths: np.ndarray) -> np.ndarray:
    """``0 .. length - 1`` for each length, concatenated."""
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    return np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(starts, lengths)
