"""Columnar decoding: every stored step of one numerics tag into numpy arrays at once.

The per-step tensor (see ``tandv_tb.summary``) is a 1-D int64 vector
``[dtype_code, numel, zero, nan, posinf, neginf, bins_lo + BINS_OFFSET, n_bins, *counts,
*(underflow, overflow) per format, *9 statistics]``. Decoding the steps of a tag one by one
costs a Python call per step; here they are concatenated and sliced with fancy indexing, so
a tag of 1,000 steps decodes in a handful of numpy operations. Steps that
``summary.decode_tensor`` refuses are skipped; ``tests/test_plugin_columns.py`` checks both
agree step by step.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

import numpy as np

from tandv_tb import formats as fmt
from tandv_tb import metadata
from tandv_tb.plugin.reading import RawSeries, from_arrays
from tandv_tb.stats.record import COUNTS, STATISTICS, NumericsRecord
from tandv_tb.summary import BINS_OFFSET

logger = logging.getLogger(__name__)

HEADER = len(COUNTS) + 3  # dtype_code, the counts, bins_lo + BINS_OFFSET, n_bins
_FLOAT64_CODE = metadata.DTYPE_CODES.index("float64")
_MIN_EXPONENT = np.array([fmt.info(d).min_exponent for d in metadata.DTYPE_CODES])
_MAX_EXPONENT = np.array([fmt.info(d).max_exponent for d in metadata.DTYPE_CODES])


@dataclasses.dataclass
class LayerSeries:
    """Every held step of one tag, ascending by step (one row per step)."""

    tag_info: metadata.TagInfo
    steps: np.ndarray  # int64[S]
    wall_times: np.ndarray  # float64[S]
    dtype_codes: np.ndarray  # int64[S], indices into metadata.DTYPE_CODES
    counts: np.ndarray  # int64[S, len(COUNTS)]
    statistics: np.ndarray  # float64[S, len(STATISTICS)]
    casts: np.ndarray  # int64[S, len(formats), 2]: (underflow, overflow)
    bins_lo: np.ndarray  # int64[S]
    bin_starts: np.ndarray  # int64[S + 1], rows' slices of ``bins``
    bins: np.ndarray  # int64[sum of n_bins]: the non-empty bin ranges, concatenated
    skipped_steps: int = 0  # stored steps left out as malformed

    @property
    def formats(self) -> tuple[str, ...]:
        return tuple(self.tag_info.formats)

    def __len__(self) -> int:
        return len(self.steps)

    def count(self, name: str) -> np.ndarray:
        return self.counts[:, COUNTS.index(name)]

    def statistic(self, name: str) -> np.ndarray:
        return self.statistics[:, STATISTICS.index(name)]

    def dtype(self, row: int) -> str:
        return metadata.DTYPE_CODES[int(self.dtype_codes[row])]

    def nbytes(self) -> int:
        arrays = (self.steps, self.wall_times, self.dtype_codes, self.counts, self.statistics)
        return (
            sum(a.nbytes for a in arrays) + self.casts.nbytes + self.bins.nbytes + 2 * 8 * len(self)
        )

    def record(self, row: int) -> NumericsRecord:
        """The ``NumericsRecord`` of one row."""
        head = self.counts[row]
        underflow = {f: int(c) for f, c in zip(self.formats, self.casts[row, :, 0])}
        overflow = {f: int(c) for f, c in zip(self.formats, self.casts[row, :, 1])}
        return NumericsRecord(
            dtype=self.dtype(row),
            numel=int(head[0]),
            zero_count=int(head[1]),
            nan_count=int(head[2]),
            posinf_count=int(head[3]),
            neginf_count=int(head[4]),
            bins_lo=int(self.bins_lo[row]),
            counts=self.bins[self.bin_starts[row] : self.bin_starts[row + 1]].astype(np.int64),
            statistics=dict(zip(STATISTICS, self.statistics[row].tolist())),
            underflow=underflow,
            overflow=overflow,
        )

    def take(self, rows: np.ndarray) -> LayerSeries:
        """The sub-series of the given rows (ascending)."""
        rows = np.asarray(rows, dtype=np.int64)
        lengths = self.bin_starts[rows + 1] - self.bin_starts[rows]
        return LayerSeries(
            tag_info=self.tag_info,
            steps=self.steps[rows],
            wall_times=self.wall_times[rows],
            dtype_codes=self.dtype_codes[rows],
            counts=self.counts[rows],
            statistics=self.statistics[rows],
            casts=self.casts[rows],
            bins_lo=self.bins_lo[rows],
            bin_starts=np.concatenate(([0], np.cumsum(lengths))).astype(np.int64),
            bins=self.bins[_ragged_index(self.bin_starts[rows], lengths)],
        )

    def nearest_row(self, step: int) -> int:
        """The row of the held step nearest to ``step`` (the earlier one on a tie)."""
        right = int(np.searchsorted(self.steps, step, side="left"))
        if right == 0:
            return 0
        if right == len(self.steps):
            return right - 1
        left = right - 1
        return left if step - self.steps[left] <= self.steps[right] - step else right


def decode_series(raw: RawSeries, tag_info: metadata.TagInfo) -> LayerSeries:
    """Decode the stored steps of one tag; malformed steps are skipped with a warning.

    Of two data at the same step only the later one stays (TensorBoard's own rule).
    """
    n_formats, n_stats = len(tag_info.formats), len(STATISTICS)
    flat = raw.flat
    offsets = np.concatenate(([0], np.cumsum(np.maximum(raw.lengths, 0))[:-1])).astype(np.int64)
    kept = np.flatnonzero(raw.lengths >= HEADER)
    lengths, starts = raw.lengths[kept], offsets[kept]
    header = flat[starts[:, None] + np.arange(HEADER)].reshape(len(kept), HEADER)

    good = _plausible_headers(header, lengths, n_formats, n_stats)
    kept, header, starts = kept[good], header[good], starts[good]
    step_array = raw.steps[kept]
    order = _ascending_unique_last(step_array)
    kept, header, starts = kept[order], header[order], starts[order]

    n_bins = header[:, HEADER - 1]
    bin_starts = np.concatenate(([0], np.cumsum(n_bins))).astype(np.int64)
    bins = flat[_ragged_index(starts + HEADER, n_bins)]
    cast_at = starts + HEADER + n_bins
    casts = flat[cast_at[:, None] + np.arange(2 * n_formats)].reshape(len(kept), n_formats, 2)
    stat_bits = flat[(cast_at + 2 * n_formats)[:, None] + np.arange(n_stats)]
    stat_bits = stat_bits.reshape(len(kept), n_stats)
    bins_lo = np.where(n_bins > 0, header[:, HEADER - 2] - BINS_OFFSET, 0)

    consistent = _consistent(header, bins, bin_starts, bins_lo, casts, stat_bits)
    if not consistent.all():
        keep_bins = np.repeat(consistent, n_bins)
        kept, header, bins_lo = kept[consistent], header[consistent], bins_lo[consistent]
        casts, stat_bits, bins = casts[consistent], stat_bits[consistent], bins[keep_bins]
        bin_starts = np.concatenate(([0], np.cumsum(header[:, HEADER - 1]))).astype(np.int64)
    malformed = len(raw.steps) - len(good) + int((~good).sum()) + int((~consistent).sum())
    if malformed:
        logger.warning("skipped %d malformed step(s) of numerics tag %r", malformed, tag_info.name)
    return LayerSeries(
        tag_info=tag_info,
        steps=raw.steps[kept],
        wall_times=raw.wall_times[kept],
        dtype_codes=header[:, 0].copy(),
        counts=header[:, 1 : 1 + len(COUNTS)].copy(),
        statistics=_decode_statistics(stat_bits, header[:, 0] == _FLOAT64_CODE),
        casts=casts,
        bins_lo=bins_lo,
        bin_starts=bin_starts,
        bins=bins,
        skipped_steps=malformed,
    )


def decode_arrays(
    steps: Sequence[int],
    wall_times: Sequence[float],
    arrays: Sequence[np.ndarray],
    tag_info: metadata.TagInfo,
) -> LayerSeries:
    """``decode_series`` of one ndarray per step (as ``read_tensors`` gives them)."""
    return decode_series(from_arrays(list(steps), list(wall_times), list(arrays)), tag_info)


def _plausible_headers(
    header: np.ndarray, lengths: np.ndarray, n_formats: int, n_stats: int
) -> np.ndarray:
    """Rows whose dtype code is known, counts non-negative and length as announced."""
    n_bins = header[:, HEADER - 1]
    return (
        (n_bins >= 0)
        & (lengths == HEADER + n_bins + 2 * n_formats + n_stats)
        & (header[:, 0] >= 0)
        & (header[:, 0] < len(metadata.DTYPE_CODES))
        & (header[:, 1 : 1 + len(COUNTS)] >= 0).all(axis=1)
    )


def _consistent(
    header: np.ndarray,
    bins: np.ndarray,
    bin_starts: np.ndarray,
    bins_lo: np.ndarray,
    casts: np.ndarray,
    stat_bits: np.ndarray,
) -> np.ndarray:
    """Rows whose counts add up to numel, bins lie in the dtype's range, casts are >= 0
    and float32 statistics are uint32 patterns (what ``decode_tensor`` checks)."""
    n_bins = header[:, HEADER - 1]
    bin_sums = np.concatenate(([0], np.cumsum(bins)))[bin_starts]
    negative_bin = np.concatenate(([0], np.cumsum(bins < 0)))[bin_starts]
    totals = header[:, 2:6].sum(axis=1) + np.diff(bin_sums)
    codes = header[:, 0]
    in_range = (n_bins == 0) | (
        (bins_lo >= _MIN_EXPONENT[codes]) & (bins_lo + n_bins - 1 <= _MAX_EXPONENT[codes])
    )
    float64 = codes == _FLOAT64_CODE
    stats_ok = float64 | ((stat_bits >= 0) & (stat_bits <= 0xFFFFFFFF)).all(axis=1)
    return (
        (totals == header[:, 1])
        & (np.diff(negative_bin) == 0)
        & in_range
        & (casts >= 0).all(axis=(1, 2))
        & stats_ok
    )


def _ragged_index(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Indices ``starts[i] + k`` for ``k < lengths[i]``, concatenated over i."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    return np.arange(total, dtype=np.int64) + offsets


def _decode_statistics(bits: np.ndarray, is_float64: np.ndarray) -> np.ndarray:
    """Float32 bit patterns (stored as uint32 values) or float64 bit patterns, per row."""
    with np.errstate(invalid="ignore"):  # signalling NaN patterns stay NaN
        out = (bits & 0xFFFFFFFF).astype(np.uint32).view(np.float32).astype(np.float64)
    if is_float64.any():
        out[is_float64] = bits[is_float64].view(np.float64)
    return out.reshape(bits.shape)


def _ascending_unique_last(steps: np.ndarray) -> np.ndarray:
    """Row order sorting ``steps`` ascending; of repeated steps only the last one stays."""
    order = np.argsort(steps, kind="stable")
    sorted_steps = steps[order]
    last = np.ones(len(order), dtype=bool)
    last[:-1] = sorted_steps[1:] != sorted_steps[:-1]
    return order[last]
