"""Columnar decoding of stored vectors: many records of many tags in a handful of numpy
operations, instead of a Python call per record (``summary.decode_tensor``).

Each record is the int64 vector of ``tandv_tb.disk.summary`` stored as varint bytes:
``[dtype_code, numel, zero, nan, posinf, neginf, bins_lo + BINS_OFFSET, n_bins, *counts,
*(underflow, overflow) per format, *9 statistics]``. A record is kept only when
``decode_tensor`` would accept it (known dtype, length as announced, counts that add up,
bins in the dtype's range, float32 statistics as uint32 patterns);
``tests/test_record_columns.py`` checks both agree record by record.
"""

from __future__ import annotations

import dataclasses

import numba
import numpy as np

from tandv_tb import formats as fmt
from tandv_tb.disk import metadata
from tandv_tb.disk.record import COUNTS, STATISTICS, NumericsRecord
from tandv_tb.disk.summary import BINS_OFFSET, HEADER, decode_varint_parts

_FLOAT64_CODE = metadata.DTYPE_CODES.index("float64")
_MIN_EXPONENT = np.array([fmt.info(d).min_exponent for d in metadata.DTYPE_CODES])
_MAX_EXPONENT = np.array([fmt.info(d).max_exponent for d in metadata.DTYPE_CODES])


@dataclasses.dataclass
class DecodedRows:
    """The readable records among the rows given to ``decode_rows``, in their order.

    ``kept[i]`` is the input row of decoded row i. Row i's bins are
    ``bins[bin_starts[i]:bin_starts[i + 1]]`` (from exponent ``bins_lo[i]``); its casts are
    ``casts[cast_starts[i]:cast_starts[i + 1]]``, (underflow, overflow) pairs in the tag's
    format order."""

    kept: np.ndarray  # int64[K]
    dtype_codes: np.ndarray  # int64[K]
    counts: np.ndarray  # int64[K, len(COUNTS)]
    statistics: np.ndarray  # float64[K, len(STATISTICS)]
    bins_lo: np.ndarray  # int64[K]
    bin_starts: np.ndarray  # int64[K + 1]
    bins: np.ndarray  # int64
    cast_starts: np.ndarray  # int64[K + 1]
    casts: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.kept)


def decode_rows(contents: np.ndarray, sizes: np.ndarray, n_formats: np.ndarray) -> DecodedRows:
    """Decode the varint records laid end to end in ``contents`` (``sizes[i]`` bytes each,
    -1 for a row without a stored vector; ``n_formats[i]`` formats in its tag)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    whole = np.maximum(sizes, 0)
    try:
        flat, lengths = decode_varint_parts(contents, whole)
    except ValueError:  # a cut varint somewhere: decode row by row to find it
        flat, lengths = _decode_each(contents, whole)
    lengths = np.where(sizes < 0, -1, lengths)
    return decode_vectors(flat, lengths, np.asarray(n_formats, dtype=np.int64))


def _decode_each(contents: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    parts, lengths, start = [], [], 0
    for size in sizes.tolist():
        try:
            values, _ = decode_varint_parts(
                contents[start : start + size], np.array([size], dtype=np.int64)
            )
            parts.append(values)
            lengths.append(len(values))
        except ValueError:
            lengths.append(-1)
        start += size
    flat = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return flat, np.asarray(lengths, dtype=np.int64)


def decode_vectors(flat: np.ndarray, lengths: np.ndarray, n_formats: np.ndarray) -> DecodedRows:
    """Decode int64 vectors laid end to end in ``flat`` (``lengths[i]`` values each, -1 for
    a row that holds none)."""
    n_stats = len(STATISTICS)
    offsets = np.concatenate(([0], np.cumsum(np.maximum(lengths, 0))[:-1])).astype(np.int64)
    kept = np.flatnonzero(lengths >= HEADER)
    header = flat[offsets[kept][:, None] + np.arange(HEADER)].reshape(len(kept), HEADER)
    good = _plausible(header, lengths[kept], n_formats[kept], n_stats)
    kept, header = kept[good], header[good]
    starts, row_formats = offsets[kept], n_formats[kept]

    n_bins = header[:, HEADER - 1]
    bins = flat[ragged_index(starts + HEADER, n_bins)]
    bin_starts = _starts(n_bins)
    cast_at = starts + HEADER + n_bins
    casts = flat[ragged_index(cast_at, 2 * row_formats)]
    cast_starts = _starts(2 * row_formats)
    stat_bits = flat[(cast_at + 2 * row_formats)[:, None] + np.arange(n_stats)]
    stat_bits = stat_bits.reshape(len(kept), n_stats)
    bins_lo = np.where(n_bins > 0, header[:, HEADER - 2] - BINS_OFFSET, 0)

    ok = _consistent(header, bins, bin_starts, bins_lo, casts, cast_starts, stat_bits)
    if not ok.all():
        bins = bins[np.repeat(ok, n_bins)]
        casts = casts[np.repeat(ok, 2 * row_formats)]
        kept, header, bins_lo, stat_bits = kept[ok], header[ok], bins_lo[ok], stat_bits[ok]
        bin_starts = _starts(header[:, HEADER - 1])
        cast_starts = _starts(2 * row_formats[ok])
    return DecodedRows(
        kept=kept,
        dtype_codes=header[:, 0].copy(),
        counts=header[:, 1 : 1 + len(COUNTS)].copy(),
        statistics=_decode_statistics(stat_bits, header[:, 0] == _FLOAT64_CODE),
        bins_lo=bins_lo,
        bin_starts=bin_starts,
        bins=bins,
        cast_starts=cast_starts,
        casts=casts,
    )


def _starts(lengths: np.ndarray) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)


def _plausible(
    header: np.ndarray, lengths: np.ndarray, n_formats: np.ndarray, n_stats: int
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
    cast_starts: np.ndarray,
    stat_bits: np.ndarray,
) -> np.ndarray:
    """Rows whose counts add up to numel, bins lie in the dtype's range, casts are >= 0
    and float32 statistics are uint32 patterns (what ``decode_tensor`` checks)."""
    n_bins = header[:, HEADER - 1]
    bin_sums = np.diff(np.concatenate(([0], np.cumsum(bins)))[bin_starts])
    negative_bins = np.diff(np.concatenate(([0], np.cumsum(bins < 0)))[bin_starts])
    negative_casts = np.diff(np.concatenate(([0], np.cumsum(casts < 0)))[cast_starts])
    totals = header[:, 2:6].sum(axis=1) + bin_sums
    codes = header[:, 0]
    in_range = (n_bins == 0) | (
        (bins_lo >= _MIN_EXPONENT[codes]) & (bins_lo + n_bins - 1 <= _MAX_EXPONENT[codes])
    )
    float64 = codes == _FLOAT64_CODE
    stats_ok = float64 | ((stat_bits >= 0) & (stat_bits <= 0xFFFFFFFF)).all(axis=1)
    return (
        (totals == header[:, 1])
        & (negative_bins == 0)
        & (negative_casts == 0)
        & in_range
        & stats_ok
    )


def gather_ranges(
    data: np.ndarray,
    starts: np.ndarray,
    sizes: np.ndarray,
    *,
    out: np.ndarray | None = None,
    out_starts: np.ndarray | None = None,
) -> np.ndarray:
    """The byte ranges ``data[starts[i]:starts[i] + sizes[i]]`` laid end to end, or each
    written at ``out[out_starts[i]:]`` (one pass, without the index array that fancy
    indexing would build: one int64 per byte)."""
    starts = np.asarray(starts, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    if out is None:
        out = np.empty(int(sizes.sum()), dtype=np.uint8)
        out_starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    out_starts = np.asarray(out_starts, dtype=np.int64)
    if len(starts) and (
        starts.min() < 0
        or sizes.min() < 0
        or (starts + sizes).max() > len(data)
        or out_starts.min() < 0
        or (out_starts + sizes).max() > len(out)
    ):
        raise ValueError("a byte range lies outside the data")
    _gather(data, starts, sizes, out, out_starts)
    return out


@numba.njit(cache=True, nogil=True)
def _gather(data, starts, sizes, out, out_starts):
    for i in range(len(starts)):
        out[out_starts[i] : out_starts[i] + sizes[i]] = data[starts[i] : starts[i] + sizes[i]]


def ragged_index(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Indices ``starts[i] + k`` for ``k < lengths[i]``, concatenated over i."""
    lengths = np.asarray(lengths, dtype=np.int64)
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


def to_record(rows: DecodedRows, i: int, formats: tuple[str, ...]) -> NumericsRecord:
    """The ``NumericsRecord`` of decoded row ``i`` (its tag records ``formats``)."""
    casts = rows.casts[rows.cast_starts[i] : rows.cast_starts[i + 1]].tolist()
    return NumericsRecord(
        dtype=metadata.DTYPE_CODES[int(rows.dtype_codes[i])],
        **dict(zip(COUNTS, rows.counts[i].tolist())),
        bins_lo=int(rows.bins_lo[i]),
        counts=rows.bins[rows.bin_starts[i] : rows.bin_starts[i + 1]].copy(),
        statistics=dict(zip(STATISTICS, rows.statistics[i].tolist())),
        underflow=dict(zip(formats, casts[0::2])),
        overflow=dict(zip(formats, casts[1::2])),
    )
