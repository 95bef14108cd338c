"""Columnar decoding of stored vectors: many records of many tags in a handful of numpy
operations; ``decode_tensor`` decodes one record by the same rule.

Each record is the int64 vector of ``tandv_tb.disk.summary`` stored as varint bytes:
``[dtype_code, numel, zero, nan, posinf, neginf, bins_lo + BINS_OFFSET, n_bins, *counts,
*(underflow, overflow) per format, *9 statistics]``. A record is kept only when
it passes the checks of the format (known dtype, length as announced, counts that add up,
bins in the dtype's range, float32 statistics as uint32 patterns): the one rule, which
``decode_vector`` (and so ``decode_tensor``) applies to a single record.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tandv_tb import formats as fmt
from tandv_tb.disk import metadata, small_loops
from tandv_tb.disk.metadata import TagInfo
from tandv_tb.disk.record import COUNTS, STATISTICS, NumericsRecord
from tandv_tb.disk.summary import BINS_OFFSET, HEADER, decode_varint_parts, stored_vector

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
    offsets = np.concatenate(([0], np.cumsum(np.maximum(lengths, 0))[:-1])).astype(np.int64)
    kept = np.flatnonzero(lengths >= HEADER)
    header = flat[offsets[kept][:, None] + np.arange(HEADER)].reshape(len(kept), HEADER)
    good = _passes(_header_checks(header, lengths[kept], n_formats[kept]))
    kept, header = kept[good], header[good]
    row_formats = n_formats[kept]
    parts = _Parts.gather(flat, offsets[kept], header, row_formats)
    ok = _passes(_content_checks(header, parts))
    if not ok.all():
        kept, header, row_formats = kept[ok], header[ok], row_formats[ok]
        parts = _Parts.gather(flat, offsets[kept], header, row_formats)
    return DecodedRows(
        kept=kept,
        dtype_codes=header[:, 0].copy(),
        counts=header[:, 1 : 1 + len(COUNTS)].copy(),
        statistics=_decode_statistics(parts.stat_bits, header[:, 0] == _FLOAT64_CODE),
        bins_lo=parts.bins_lo,
        bin_starts=parts.bin_starts,
        bins=parts.bins,
        cast_starts=parts.cast_starts,
        casts=parts.casts,
    )


def decode_tensor(array: np.ndarray, info: TagInfo) -> NumericsRecord:
    """The ``NumericsRecord`` of one stored step (the ndarray of its ``TensorProto``, either
    version); ``ValueError`` if it is malformed."""
    return decode_vector(stored_vector(array), info.formats)


def decode_vector(values: np.ndarray, formats: tuple[str, ...]) -> NumericsRecord:
    """One stored int64 vector as a record, by the checks of ``decode_vectors``;
    ``ValueError`` naming the first check it fails."""
    values = np.asarray(values, dtype=np.int64)
    lengths, n_formats = np.array([len(values)]), np.array([len(formats)])
    rows = decode_vectors(values, lengths, n_formats)
    if len(rows):
        return to_record(rows, 0, formats)
    if len(values) < HEADER:
        raise ValueError(f"a numerics tensor has at least {HEADER} values, got {len(values)}")
    header = values[None, :HEADER]
    failed = _first_failed(_header_checks(header, lengths, n_formats))
    if failed is None:
        parts = _Parts.gather(values, np.zeros(1, np.int64), header, n_formats)
        failed = _first_failed(_content_checks(header, parts)) or "statistics"
    raise ValueError(_refusal(failed, values, len(formats)))


def _starts(lengths: np.ndarray) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)


@dataclasses.dataclass
class _Parts:
    """The bins, casts and statistics' bit patterns of rows whose header passed its checks."""

    bins_lo: np.ndarray
    bin_starts: np.ndarray
    bins: np.ndarray
    cast_starts: np.ndarray
    casts: np.ndarray
    stat_bits: np.ndarray

    @classmethod
    def gather(cls, flat, starts, header, row_formats) -> _Parts:
        n_stats = len(STATISTICS)
        n_bins = header[:, HEADER - 1]
        cast_at = starts + HEADER + n_bins
        stat_bits = flat[(cast_at + 2 * row_formats)[:, None] + np.arange(n_stats)]
        return cls(
            bins_lo=np.where(n_bins > 0, header[:, HEADER - 2] - BINS_OFFSET, 0),
            bin_starts=_starts(n_bins),
            bins=flat[ragged_index(starts + HEADER, n_bins)],
            cast_starts=_starts(2 * row_formats),
            casts=flat[ragged_index(cast_at, 2 * row_formats)],
            stat_bits=stat_bits.reshape(len(starts), n_stats),
        )


# The rule for a stored vector, one check per reason a row is refused, in the order the
# reasons are told (``decode_vector`` names the first that fails).
def _header_checks(
    header: np.ndarray, lengths: np.ndarray, n_formats: np.ndarray
) -> dict[str, np.ndarray]:
    """Rows whose dtype code is known, length as announced and counts non-negative."""
    n_bins, codes = header[:, HEADER - 1], header[:, 0]
    return {
        "dtype": (codes >= 0) & (codes < len(metadata.DTYPE_CODES)),
        "length": (n_bins >= 0) & (lengths == HEADER + n_bins + 2 * n_formats + len(STATISTICS)),
        "negative": (header[:, 1 : 1 + len(COUNTS)] >= 0).all(axis=1),
    }


def _content_checks(header: np.ndarray, parts: _Parts) -> dict[str, np.ndarray]:
    """Rows whose bins and casts are >= 0, counts add up to numel, bins lie in the dtype's
    range and float32 statistics are uint32 patterns."""
    n_bins, codes = header[:, HEADER - 1], header[:, 0]
    bin_sums = np.diff(np.concatenate(([0], np.cumsum(parts.bins)))[parts.bin_starts])
    negative_bins = np.diff(np.concatenate(([0], np.cumsum(parts.bins < 0)))[parts.bin_starts])
    negative_casts = np.diff(np.concatenate(([0], np.cumsum(parts.casts < 0)))[parts.cast_starts])
    lo = parts.bins_lo
    in_range = (n_bins == 0) | (
        (lo >= _MIN_EXPONENT[codes]) & (lo + n_bins - 1 <= _MAX_EXPONENT[codes])
    )
    bits = parts.stat_bits
    return {
        "negative": (negative_bins == 0) & (negative_casts == 0),
        "total": header[:, 2:6].sum(axis=1) + bin_sums == header[:, 1],
        "range": in_range,
        "statistics": (codes == _FLOAT64_CODE) | ((bits >= 0) & (bits <= 0xFFFFFFFF)).all(axis=1),
    }


def _passes(checks: dict[str, np.ndarray]) -> np.ndarray:
    return np.logical_and.reduce(list(checks.values()))


def _first_failed(checks: dict[str, np.ndarray]) -> str | None:
    return next((reason for reason, ok in checks.items() if not ok.all()), None)


def _refusal(reason: str, values: np.ndarray, n_formats: int) -> str:
    """The sentence that says why one vector was refused."""
    code, n_bins = int(values[0]), int(values[HEADER - 1])
    if reason == "dtype":
        return f"unknown dtype code {code} (this tandv_tb knows {len(metadata.DTYPE_CODES)})"
    if reason == "length":
        expected = HEADER + max(n_bins, 0) + 2 * n_formats + len(STATISTICS)
        return (
            f"a numerics tensor with {n_bins} bins and {n_formats} formats has {expected} "
            f"values, got {len(values)}"
        )
    if reason == "negative":
        return "a numerics tensor holds negative counts"
    if reason == "total":
        total = int(values[2 : 1 + len(COUNTS)].sum() + values[HEADER : HEADER + n_bins].sum())
        return f"a numerics tensor's counts add up to {total}, not numel {int(values[1])}"
    if reason == "range":
        lo, dtype = int(values[HEADER - 2]) - BINS_OFFSET, metadata.DTYPE_CODES[code]
        info = fmt.info(dtype)
        return (
            f"a numerics tensor's bins {lo}..{lo + n_bins - 1} lie outside {dtype}'s range "
            f"{info.min_exponent}..{info.max_exponent}"
        )
    return "float32 statistics out of the uint32 range"


def gather_ranges(
    data: np.ndarray,
    starts: np.ndarray,
    sizes: np.ndarray,
    *,
    out: np.ndarray | None = None,
    out_starts: np.ndarray | None = None,
) -> np.ndarray:
    """The byte ranges ``data[starts[i]:starts[i] + sizes[i]]`` laid end to end, or each
    written at ``out[out_starts[i]:]``: small inputs by numpy indexing (``small_loops``),
    large ones in one compiled pass, without the index array (one int64 per byte)."""
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
    if sizes.sum() <= small_loops.SMALL_BYTES:  # numba's first call costs more
        out[ragged_index(out_starts, sizes)] = data[ragged_index(starts, sizes)]
        return out
    from tandv_tb.disk import kernels  # numba: loaded on first use

    kernels.gather(data, starts, sizes, out, out_starts)
    return out


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
