"""Columnar decoding of stored vectors: many records of many tags at once, in one compiled
pass (``numba_loops.scan_records``) or, for small inputs, a handful of numpy operations;
``decode_tensor`` decodes one record by the same rule.

Each record is the int64 vector of ``tandv_tb.event_files.summary`` stored as varint bytes:
``[dtype_code, numel, zero, nan, posinf, neginf, bins_lo + BINS_OFFSET, n_bins, *counts,
*(underflow, overflow) per format, *9 statistics, *block formats section]``. A record is
kept only when it passes the checks of the format (whole varints, at least the header,
known dtype, length as announced, no negative count, counts that add up, bins in the
dtype's range, float32 statistics as uint32 patterns, a well-formed block formats section):
the one rule, ``_first_failed``, written once. Both decoders only gather the facts it
judges (``_Facts``); ``decode_vector`` (and so ``decode_tensor``) names the first check a
single record fails. The block formats section is self-describing, so callers that know
nothing of block formats read such records all the same (without it); ``block_columns``
checks it and decodes it in columns.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from tandv_tb import formats as fmt
from tandv_tb.event_files import metadata, small_loops
from tandv_tb.event_files.block_columns import BlockEntries, block_entries, block_failures
from tandv_tb.event_files.metadata import TagInfo
from tandv_tb.event_files.record import COUNTS, STATISTICS, NumericsRecord
from tandv_tb.event_files.summary import BINS_OFFSET, HEADER, stored_vector
from tandv_tb.filesystems.ranges import ragged_index, segment_sums, starts_of

_FLOAT64_CODE = metadata.DTYPE_CODES.index("float64")
_MIN_EXPONENT = np.array([fmt.info(d).min_exponent for d in metadata.DTYPE_CODES])
_MAX_EXPONENT = np.array([fmt.info(d).max_exponent for d in metadata.DTYPE_CODES])


@dataclasses.dataclass
class DecodedRows:
    """The readable records among the rows given to ``decode_rows``, in their order.

    ``kept[i]`` is the input row of decoded row i. Row i's bins (unless left out) are
    ``bins[bin_starts[i]:bin_starts[i + 1]]`` (from exponent ``bins_lo[i]``); its casts are
    ``casts[cast_starts[i]:cast_starts[i + 1]]``, (underflow, overflow) pairs in the tag's
    format order; its block formats section ``tails[tail_starts[i]:tail_starts[i + 1]]``
    (empty when it has none), as columns in ``blocks`` (``block_columns``)."""

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
        return block_entries(self.tails, self.tail_starts, len(self))


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
    from tandv_tb.event_files import numba_loops  # numba: loaded on first use

    scanned = numba_loops.scan_records(
        contents, sizes, n_formats, HEADER, len(STATISTICS), with_bins
    )
    n_values, header, body, stat_bits, bin_starts, bins, cast_starts, casts, tail_starts, tails = (
        scanned
    )
    bad_blocks = block_failures(tails, tail_starts, n_blocks)
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
        bin_starts=starts_of(n_bins),
        bins=bins if with_bins else None,
        cast_starts=starts_of(2 * n_formats[kept]),
        casts=casts,
        stat_bits=stat_bits,
        tail_starts=tail_starts,
        tails=tails,
    )
    return _rows(kept, header, parts)


def _kept_starts(starts: np.ndarray, kept: np.ndarray) -> np.ndarray:
    return starts_of((starts[1:] - starts[:-1])[kept])


def _compact(values: np.ndarray, starts: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """The ragged parts ``values[starts[i]:starts[i + 1]]`` of the ``kept`` rows, in order."""
    from tandv_tb.filesystems import numba_loops

    sizes = (starts[1:] - starts[:-1])[kept]
    out = np.empty(int(sizes.sum()), dtype=values.dtype)
    numba_loops.gather(values, starts[kept], sizes, out, starts_of(sizes)[:-1])
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
    facts.negative_bins[inside] = segment_sums(parts.bins < 0, parts.bin_starts)
    facts.bin_sum[inside] = segment_sums(parts.bins, parts.bin_starts)
    facts.negative_casts[inside] = segment_sums(parts.casts < 0, parts.cast_starts)
    facts.stat_min[inside] = parts.stat_bits.min(axis=1)
    facts.stat_max[inside] = parts.stat_bits.max(axis=1)
    tail_lengths = np.zeros(len(lengths), dtype=np.int64)
    tail_lengths[inside] = np.diff(parts.tail_starts)
    facts.bad_blocks[:] = block_failures(parts.tails, starts_of(tail_lengths), n_blocks)
    codes = _first_failed(facts, n_formats)
    kept = np.flatnonzero(codes == 0)
    if len(kept) < len(inside):
        parts = _Parts.gather(flat, offsets[kept], header[kept], n_formats[kept], lengths[kept])
    return codes, _rows(kept, header[kept], parts)


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
            bin_starts=starts_of(n_bins),
            bins=flat[ragged_index(starts + HEADER, n_bins)],
            cast_starts=starts_of(2 * row_formats),
            casts=flat[ragged_index(cast_at, 2 * row_formats)],
            stat_bits=stat_bits.reshape(len(starts), n_stats),
            tail_starts=starts_of(tail_lengths),
            tails=flat[ragged_index(stat_at + n_stats, tail_lengths)],
        )


@dataclasses.dataclass
class _Facts:
    """What the rule judges of each row: its length (-1: no vector, or a cut or over-long
    varint), header (zeros if shorter) and, where the announced parts fit the vector, how
    many bins and casts are negative, the bins' sum, the statistics' least and greatest
    bit patterns (the compiled ``numba_loops.scan_records`` gives these five in this order) and
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


def _decode_statistics(bits: np.ndarray, is_float64: np.ndarray) -> np.ndarray:
    """Float32 bit patterns (stored as uint32 values) or float64 bit patterns, per row."""
    with np.errstate(invalid="ignore"):  # signalling NaN patterns stay NaN
        out = (bits & 0xFFFFFFFF).astype(np.uint32).view(np.float32).astype(np.float64)
    if is_float64.any():
        out[is_float64] = bits[is_float64].view(np.float64)
    return out.reshape(bits.shape)


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
