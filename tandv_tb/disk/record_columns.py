"""Columnar decoding of stored vectors: many records of many tags at once, in one compiled
pass (``kernels.scan_records``) or, for small inputs, a handful of numpy operations;
``decode_tensor`` decodes one record by the same rule.

Each record is the int64 vector of ``tandv_tb.disk.summary`` stored as varint bytes:
``[dtype_code, numel, zero, nan, posinf, neginf, bins_lo + BINS_OFFSET, n_bins, *counts,
*(underflow, overflow) per format, *9 statistics, *block formats section]``. A record is
kept only when it passes the checks of the format (whole varints, at least the header,
known dtype, length as announced, no negative count, counts that add up, bins in the
dtype's range, float32 statistics as uint32 patterns, a well-formed block formats section):
the one rule, ``_first_failed``, written once. Both decoders only gather the facts it
judges (``_Facts``); ``decode_vector`` (and so ``decode_tensor``) names the first check a
single record fails. The block formats section is self-describing, so callers that know
nothing of block formats read such records all the same (without it).
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from tandv_tb import formats as fmt
from tandv_tb.disk import metadata, small_loops
from tandv_tb.disk.metadata import TagInfo
from tandv_tb.disk.record import COUNTS, STATISTICS, BlockCounts, NumericsRecord
from tandv_tb.disk.summary import (
    BINS_OFFSET,
    BLOCK_HEAD,
    BLOCK_SUMS,
    HEADER,
    SCALE_OFFSET,
    stored_vector,
)
from tandv_tb.formats.blocks import MX_SCALE_MAX, MX_SCALE_MIN

_FLOAT64_CODE = metadata.DTYPE_CODES.index("float64")
_MIN_EXPONENT = np.array([fmt.info(d).min_exponent for d in metadata.DTYPE_CODES])
_MAX_EXPONENT = np.array([fmt.info(d).max_exponent for d in metadata.DTYPE_CODES])
#: Bounds of a block formats section: formats in one (every name with either scale rule),
#: scale exponents (E8M0's), and the sums' unit exponent as stored (BINS_OFFSET + e).
_MAX_BLOCK_FORMATS = 64
_SCALE_MIN, _SCALE_MAX = MX_SCALE_MIN, MX_SCALE_MAX
_MAX_STORED_EXPONENT = 2 * BINS_OFFSET
_FLOAT64_INF_BITS = 0x7FF0000000000000


@dataclasses.dataclass
class DecodedRows:
    """The readable records among the rows given to ``decode_rows``, in their order.

    ``kept[i]`` is the input row of decoded row i. Row i's bins (unless left out) are
    ``bins[bin_starts[i]:bin_starts[i + 1]]`` (from exponent ``bins_lo[i]``); its casts are
    ``casts[cast_starts[i]:cast_starts[i + 1]]``, (underflow, overflow) pairs in the tag's
    format order; its block formats section ``tails[tail_starts[i]:tail_starts[i + 1]]``
    (empty when it has none), as columns in ``blocks``."""

    kept: np.ndarray  # int64[K]
    dtype_codes: np.ndarray  # int64[K]
    counts: np.ndarray  # int64[K, len(COUNTS)]
    statistics: np.ndarray  # float64[K, len(STATISTICS)]
    bins_lo: np.ndarray  # int64[K]
    bin_starts: np.ndarray  # int64[K + 1]
    bins: np.ndarray | None  # int64; None when not asked for
    cast_starts: np.ndarray  # int64[K + 1]
    casts: np.ndarray  # int64
    tail_starts: np.ndarray  # int64[K + 1]
    tails: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.kept)

    @functools.cached_property
    def blocks(self) -> BlockEntries:
        """The rows' block formats sections as columns (``block_entries``)."""
        return block_entries(self)


def decode_rows(
    contents: np.ndarray,
    sizes: np.ndarray,
    n_formats: np.ndarray,
    *,
    with_bins: bool = True,
    n_blocks: np.ndarray | None = None,
) -> DecodedRows:
    """Decode the varint records laid end to end in ``contents`` (``sizes[i]`` bytes each,
    -1 for a row without a stored vector; ``n_formats[i]`` formats in its tag, and, where
    given, ``n_blocks[i]`` block formats, which its section must hold): small well-formed
    inputs in numpy (``small_loops``), others in one compiled pass. Without ``with_bins``
    the bins are checked but not kept (``bins`` is None): copying them is most of the
    compiled pass's writes, and the store reads them from the files later."""
    sizes = np.asarray(sizes, dtype=np.int64)
    n_formats = np.asarray(n_formats, dtype=np.int64)
    n_blocks = None if n_blocks is None else np.asarray(n_blocks, dtype=np.int64)
    whole = np.maximum(sizes, 0)
    if whole.sum() <= small_loops.SMALL_BYTES:  # numba's first call costs more
        decoded = small_loops.unleb128(contents, whole)
        if decoded is not None:
            lengths = np.where(sizes < 0, -1, decoded[1])
            flat = decoded[0].view(np.int64)
            rows = _decode_vectors(flat, lengths, n_formats, n_blocks)[1]
            return rows if with_bins else dataclasses.replace(rows, bins=None)
    from tandv_tb.disk import kernels  # numba: loaded on first use

    scanned = kernels.scan_records(contents, sizes, n_formats, HEADER, len(STATISTICS), with_bins)
    n_values, header, body, stat_bits, bin_starts, bins, cast_starts, casts, tail_starts, tails = (
        scanned
    )
    bad_blocks = _block_failures(tails, tail_starts, n_blocks)
    facts = _Facts(n_values, header, *body.T, bad_blocks)
    kept = np.flatnonzero(_first_failed(facts, n_formats) == 0)
    if len(kept) < len(sizes):  # some rows refused: only the kept rows' parts stay
        header, stat_bits = header[kept], stat_bits[kept]
        bins = _compact(bins, bin_starts, kept) if with_bins else bins
        casts = _compact(casts, cast_starts, kept)
        tails, tail_starts = _compact(tails, tail_starts, kept), _kept_starts(tail_starts, kept)
    n_bins = header[:, HEADER - 1]
    parts = _Parts(
        bins_lo=np.where(n_bins > 0, header[:, HEADER - 2] - BINS_OFFSET, 0),
        bin_starts=_starts(n_bins),
        bins=bins if with_bins else None,
        cast_starts=_starts(2 * n_formats[kept]),
        casts=casts,
        stat_bits=stat_bits,
        tail_starts=tail_starts,
        tails=tails,
    )
    return _rows(kept, header, parts)


def _kept_starts(starts: np.ndarray, kept: np.ndarray) -> np.ndarray:
    return _starts((starts[1:] - starts[:-1])[kept])


def _compact(values: np.ndarray, starts: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """The ragged parts ``values[starts[i]:starts[i + 1]]`` of the ``kept`` rows, in order."""
    from tandv_tb.disk import kernels

    sizes = (starts[1:] - starts[:-1])[kept]
    out = np.empty(int(sizes.sum()), dtype=values.dtype)
    kernels.gather(values, starts[kept], sizes, out, _starts(sizes)[:-1])
    return out


def _decode_vectors(
    flat: np.ndarray, lengths: np.ndarray, n_formats: np.ndarray, n_blocks: np.ndarray | None
) -> tuple[np.ndarray, DecodedRows]:
    """Each row's ``_first_failed`` code and the rows that pass, from int64 vectors laid end
    to end in ``flat`` (``lengths[i]`` values each, -1 for a row that holds none)."""
    offsets = np.concatenate(([0], np.cumsum(np.maximum(lengths, 0))[:-1])).astype(np.int64)
    header = np.zeros((len(lengths), HEADER), dtype=np.int64)
    long_enough = lengths >= HEADER
    header[long_enough] = flat[offsets[long_enough][:, None] + np.arange(HEADER)]
    n_bins = header[:, HEADER - 1]
    fits = (  # the announced parts lie inside the vector: safe to read (the rule judges)
        long_enough
        & (n_bins >= 0)
        & (n_bins <= lengths)
        & (HEADER + n_bins + 2 * n_formats + len(STATISTICS) <= lengths)
    )
    facts = _Facts(lengths, header, *np.zeros((6, len(lengths)), dtype=np.int64))
    inside = np.flatnonzero(fits)
    parts = _Parts.gather(flat, offsets[inside], header[inside], n_formats[inside], lengths[inside])
    facts.negative_bins[inside] = _segment_sums(parts.bins < 0, parts.bin_starts)
    facts.bin_sum[inside] = _segment_sums(parts.bins, parts.bin_starts)
    facts.negative_casts[inside] = _segment_sums(parts.casts < 0, parts.cast_starts)
    facts.stat_min[inside] = parts.stat_bits.min(axis=1)
    facts.stat_max[inside] = parts.stat_bits.max(axis=1)
    tail_lengths = np.zeros(len(lengths), dtype=np.int64)
    tail_lengths[inside] = np.diff(parts.tail_starts)
    facts.bad_blocks[:] = _block_failures(parts.tails, _starts(tail_lengths), n_blocks)
    codes = _first_failed(facts, n_formats)
    kept = np.flatnonzero(codes == 0)
    if len(kept) < len(inside):
        parts = _Parts.gather(flat, offsets[kept], header[kept], n_formats[kept], lengths[kept])
    return codes, _rows(kept, header[kept], parts)


def _segment_sums(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The sums of ``values[starts[i]:starts[i + 1]]`` (int64, wrapping as the kernel's)."""
    return np.diff(np.concatenate(([0], np.cumsum(values, dtype=np.int64)))[starts])


def _rows(kept: np.ndarray, header: np.ndarray, parts: _Parts) -> DecodedRows:
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
        tail_starts=parts.tail_starts,
        tails=parts.tails,
    )


def decode_tensor(array: np.ndarray, info: TagInfo) -> NumericsRecord:
    """The ``NumericsRecord`` of one stored step (the ndarray of its ``TensorProto``, any
    version); ``ValueError`` if it is malformed."""
    return decode_vector(stored_vector(array), info.formats, info.block_formats)


def decode_vector(
    values: np.ndarray, formats: tuple[str, ...], block_formats: tuple[str, ...] = ()
) -> NumericsRecord:
    """One stored int64 vector as a record, by the rule of ``decode_rows``; ``ValueError``
    naming the first check it fails."""
    values = np.asarray(values, dtype=np.int64)
    codes, rows = _decode_vectors(
        values,
        np.array([len(values)]),
        np.array([len(formats)]),
        np.array([len(block_formats)]),
    )
    if len(rows):
        return to_record(rows, 0, formats, block_formats)
    raise ValueError(_refusal(CHECKS[codes[0] - 1], values, len(formats)))


def _starts(lengths: np.ndarray) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)


@dataclasses.dataclass
class _Parts:
    """The bins, casts and statistics' bit patterns of rows whose parts fit their vector."""

    bins_lo: np.ndarray
    bin_starts: np.ndarray
    bins: np.ndarray
    cast_starts: np.ndarray
    casts: np.ndarray
    stat_bits: np.ndarray
    tail_starts: np.ndarray
    tails: np.ndarray

    @classmethod
    def gather(cls, flat, starts, header, row_formats, lengths) -> _Parts:
        n_stats = len(STATISTICS)
        n_bins = header[:, HEADER - 1]
        cast_at = starts + HEADER + n_bins
        stat_at = cast_at + 2 * row_formats
        stat_bits = flat[stat_at[:, None] + np.arange(n_stats)]
        tail_lengths = starts + lengths - stat_at - n_stats
        return cls(
            bins_lo=np.where(n_bins > 0, header[:, HEADER - 2] - BINS_OFFSET, 0),
            bin_starts=_starts(n_bins),
            bins=flat[ragged_index(starts + HEADER, n_bins)],
            cast_starts=_starts(2 * row_formats),
            casts=flat[ragged_index(cast_at, 2 * row_formats)],
            stat_bits=stat_bits.reshape(len(starts), n_stats),
            tail_starts=_starts(tail_lengths),
            tails=flat[ragged_index(stat_at + n_stats, tail_lengths)],
        )


@dataclasses.dataclass
class _Facts:
    """What the rule judges of each row: its length (-1: no vector, or a cut or over-long
    varint), header (zeros if shorter) and, where the announced parts fit the vector, how
    many bins and casts are negative, the bins' sum, the statistics' least and greatest
    bit patterns (the compiled ``kernels.scan_records`` gives these five in this order) and
    whether its block formats section is malformed (``_block_failures``); zeros
    elsewhere."""

    n_values: np.ndarray
    header: np.ndarray
    negative_bins: np.ndarray
    bin_sum: np.ndarray
    negative_casts: np.ndarray
    stat_min: np.ndarray
    stat_max: np.ndarray
    bad_blocks: np.ndarray


#: Why a stored vector is refused, in the order the reasons are told: a row's code is 0
#: when it is kept, else 1 + the index of the first check it fails.
CHECKS = ("short", "dtype", "length", "blocks", "negative", "total", "range", "statistics")


def _first_failed(facts: _Facts, n_formats: np.ndarray) -> np.ndarray:
    """The rule for a stored vector, written once for both decoders: each row's code."""
    header = facts.header
    codes, n_bins = header[:, 0], header[:, HEADER - 1]
    known = (codes >= 0) & (codes < len(metadata.DTYPE_CODES))
    known_codes = np.where(known, codes, 0)
    lo = header[:, HEADER - 2] - BINS_OFFSET
    failed = {
        "short": facts.n_values < HEADER,
        "dtype": ~known,
        "length": (n_bins < 0)
        | (n_bins > facts.n_values)  # (and no overflow in the sum below)
        | (facts.n_values < HEADER + n_bins + 2 * n_formats + len(STATISTICS)),
        "blocks": facts.bad_blocks.astype(bool),  # what follows the statistics
        "negative": (header[:, 1 : 1 + len(COUNTS)] < 0).any(axis=1)
        | (facts.negative_bins > 0)
        | (facts.negative_casts > 0),
        "total": header[:, 2 : 1 + len(COUNTS)].sum(axis=1) + facts.bin_sum != header[:, 1],
        "range": (n_bins > 0)
        & ((lo < _MIN_EXPONENT[known_codes]) | (lo + n_bins - 1 > _MAX_EXPONENT[known_codes])),
        "statistics": (codes != _FLOAT64_CODE)
        & ((facts.stat_min < 0) | (facts.stat_max > 0xFFFFFFFF)),
    }
    return np.select([failed[check] for check in CHECKS], np.arange(1, len(CHECKS) + 1), 0)


def _refusal(reason: str, values: np.ndarray, n_formats: int) -> str:
    """The sentence that says why one vector was refused."""
    if reason == "short":
        return f"a numerics tensor has at least {HEADER} values, got {len(values)}"
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
    if reason == "statistics":
        return "float32 statistics out of the uint32 range"
    return (
        "a numerics tensor's block formats section is malformed, or does not hold the "
        "tag's block formats"
    )


def _block_failures(
    tails: np.ndarray, starts: np.ndarray, n_blocks: np.ndarray | None
) -> np.ndarray:
    """Per row, whether its block formats section ``tails[starts[i]:starts[i + 1]]`` is
    malformed (layout in ``summary``), or, where ``n_blocks`` is given, holds another
    number of formats than its tag (no section where that is 0). Vectorised over the rows,
    one block format at a time."""
    lengths = np.diff(starts)
    bad = np.zeros(len(lengths), dtype=bool)
    if n_blocks is not None:
        bad |= (lengths > 0) != (n_blocks > 0)
    rows = np.flatnonzero(lengths > 0)
    if not len(rows):
        return bad
    at, end = starts[rows].copy(), starts[rows + 1]
    count = tails[at]
    ok = (count >= 1) & (count <= _MAX_BLOCK_FORMATS)
    if n_blocks is not None:
        ok &= count == n_blocks[rows]
    at += 1
    fixed = len(BLOCK_HEAD) + 2  # the counts, scale_lo and n_scales
    for k in range(int(count[ok].max()) if ok.any() else 0):
        live = np.flatnonzero(ok & (count > k))
        fits = at[live] + fixed <= end[live]
        ok[live[~fits]] = False
        live = live[fits]
        head = tails[at[live, None] + np.arange(fixed)]
        lo, n = head[:, -2] - SCALE_OFFSET, head[:, -1]
        good = (head[:, : len(BLOCK_HEAD)] >= 0).all(axis=1) & (n >= 0)
        good &= (n == 0) | ((lo >= _SCALE_MIN) & (lo + n - 1 <= _SCALE_MAX))
        scales_at = at[live] + fixed
        good &= scales_at + np.where(good, n, 0) + 3 <= end[live]
        ok[live[~good]] = False
        live, scales_at, n = live[good], scales_at[good], n[good]
        negative = _segment_sums(tails[ragged_index(scales_at, n)] < 0, _starts(n))
        sums = tails[(scales_at + n)[:, None] + np.arange(3)]
        good = (negative == 0) & (sums[:, 0] >= 0) & (sums[:, 0] <= _MAX_STORED_EXPONENT)
        good &= ((sums[:, 1:] >= 0) & (sums[:, 1:] <= _FLOAT64_INF_BITS)).all(axis=1)
        ok[live[~good]] = False
        at[live] = scales_at + n + 3
    ok &= at == end
    bad[rows[~ok]] = True
    return bad


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


@dataclasses.dataclass(frozen=True)
class BlockEntries:
    """The block formats sections of decoded rows as columns: one entry per (row, block
    format), ordered by row, then by the format's place in its tag's ``block_formats``.

    Entry e is of decoded row ``row[e]`` and block format ``format_index[e]``; its counts
    are ``counts[e]`` (``BLOCK_HEAD``), its scale histogram ``scales[scale_starts[e]:
    scale_starts[e + 1]]`` from exponent ``scale_lo[e]`` (trimmed to its non-empty range;
    ``scale_lo`` 0 when empty), its sums ``exponent``, ``signal`` and ``error``
    (``record.BlockCounts``). Row i's entries are ``row_starts[i]:row_starts[i + 1]``."""

    row: np.ndarray  # int64[E]
    format_index: np.ndarray  # int64[E]
    counts: np.ndarray  # int64[E, len(BLOCK_HEAD)]
    scale_lo: np.ndarray  # int64[E]
    scale_starts: np.ndarray  # int64[E + 1]
    scales: np.ndarray  # int64
    exponent: np.ndarray  # int64[E]
    signal: np.ndarray  # float64[E]
    error: np.ndarray  # float64[E]
    row_starts: np.ndarray  # int64[K + 1]

    def __len__(self) -> int:
        return len(self.row)

    def block_counts(self, entry: int) -> BlockCounts:
        """The ``BlockCounts`` of one entry."""
        start, end = self.scale_starts[entry], self.scale_starts[entry + 1]
        return BlockCounts(
            *self.counts[entry].tolist(),
            scale_lo=int(self.scale_lo[entry]),
            scales=self.scales[start:end].copy(),
            exponent=int(self.exponent[entry]),
            signal=float(self.signal[entry]),
            error=float(self.error[entry]),
        )


def block_entries(rows: DecodedRows) -> BlockEntries:
    """The block formats sections of ``rows`` (each well formed: ``decode_rows`` checked
    it) as ``BlockEntries``: vectorised over the rows, one block format at a time."""
    tails, starts = rows.tails, rows.tail_starts
    holding = np.flatnonzero(np.diff(starts) > 0)
    count = tails[starts[holding]]
    at = starts[holding] + 1
    fixed = len(BLOCK_HEAD) + 2  # the counts, scale_lo and n_scales
    parts = []
    for k in range(int(count.max()) if len(count) else 0):
        live = np.flatnonzero(count > k)
        head = tails[at[live, None] + np.arange(fixed)]
        n = head[:, -1]
        scales_at = at[live] + fixed
        sums = tails[(scales_at + n)[:, None] + np.arange(len(BLOCK_SUMS))]
        parts.append((holding[live], np.full(len(live), k), head, scales_at, n, sums))
        at[live] = scales_at + n + len(BLOCK_SUMS)
    row, index, head, scales_at, n, sums = (
        [np.concatenate(part) for part in zip(*parts)]
        if parts
        else [np.zeros(0, np.int64)] * 2
        + [np.zeros((0, fixed), np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)]
        + [np.zeros((0, len(BLOCK_SUMS)), np.int64)]
    )
    order = np.lexsort((index, row))
    row, index, head, scales_at, n, sums = (
        a[order] for a in (row, index, head, scales_at, n, sums)
    )
    moments = np.ascontiguousarray(sums[:, 1:]).view(np.float64)
    return BlockEntries(
        row=row.astype(np.int64),
        format_index=index.astype(np.int64),
        counts=head[:, : len(BLOCK_HEAD)].copy(),
        scale_lo=np.where(n > 0, head[:, -2] - SCALE_OFFSET, 0),
        scale_starts=_starts(n),
        scales=tails[ragged_index(scales_at, n)],
        exponent=sums[:, 0] - BINS_OFFSET,
        signal=moments[:, 0].copy(),
        error=moments[:, 1].copy(),
        row_starts=_starts(np.bincount(row, minlength=len(rows)).astype(np.int64)),
    )


def to_record(
    rows: DecodedRows, i: int, formats: tuple[str, ...], block_formats: tuple[str, ...] = ()
) -> NumericsRecord:
    """The ``NumericsRecord`` of decoded row ``i`` (its tag records ``formats`` and
    ``block_formats``, whose section ``decode_rows`` checked with ``n_blocks``)."""
    casts = rows.casts[rows.cast_starts[i] : rows.cast_starts[i + 1]].tolist()
    entries = rows.blocks
    first, last = entries.row_starts[i], entries.row_starts[i + 1]
    return NumericsRecord(
        dtype=metadata.DTYPE_CODES[int(rows.dtype_codes[i])],
        **dict(zip(COUNTS, rows.counts[i].tolist())),
        bins_lo=int(rows.bins_lo[i]),
        counts=rows.bins[rows.bin_starts[i] : rows.bin_starts[i + 1]].copy(),
        statistics=dict(zip(STATISTICS, rows.statistics[i].tolist())),
        underflow=dict(zip(formats, casts[0::2])),
        overflow=dict(zip(formats, casts[1::2])),
        blocks={
            name: entries.block_counts(e) for name, e in zip(block_formats, range(first, last))
        },
    )
