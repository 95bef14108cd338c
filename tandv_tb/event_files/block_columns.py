"""The block formats section of stored records (layout in ``summary``), decoded in columns
for many records at once: the checks a section must pass (``block_failures``, one check of
``record_columns``' rule) and its entries as columns (``BlockEntries``)."""

from __future__ import annotations

import dataclasses

import numpy as np

from tandv_tb.event_files.record import BlockCounts
from tandv_tb.event_files.summary import BINS_OFFSET, BLOCK_HEAD, BLOCK_SUMS, SCALE_OFFSET
from tandv_tb.filesystems.ranges import ragged_index, segment_sums, starts_of
from tandv_tb.formats.blocks import MX_SCALE_MAX, MX_SCALE_MIN

#: Bounds of a block formats section: formats in one (every name with either scale rule),
#: scale exponents (E8M0's), and the sums' unit exponent as stored (BINS_OFFSET + e).
_MAX_BLOCK_FORMATS = 64
_SCALE_MIN, _SCALE_MAX = MX_SCALE_MIN, MX_SCALE_MAX
_MAX_STORED_EXPONENT = 2 * BINS_OFFSET
_FLOAT64_INF_BITS = 0x7FF0000000000000


def block_failures(
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
        negative = segment_sums(tails[ragged_index(scales_at, n)] < 0, starts_of(n))
        sums = tails[(scales_at + n)[:, None] + np.arange(3)]
        good = (negative == 0) & (sums[:, 0] >= 0) & (sums[:, 0] <= _MAX_STORED_EXPONENT)
        good &= ((sums[:, 1:] >= 0) & (sums[:, 1:] <= _FLOAT64_INF_BITS)).all(axis=1)
        ok[live[~good]] = False
        at[live] = scales_at + n + 3
    ok &= at == end
    bad[rows[~ok]] = True
    return bad


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


def block_entries(tails: np.ndarray, starts: np.ndarray, n_rows: int) -> BlockEntries:
    """The block formats sections of ``n_rows`` decoded rows, row i's
    ``tails[starts[i]:starts[i + 1]]`` (each well formed: ``block_failures`` passed it),
    as ``BlockEntries``: vectorised over the rows, one block format at a time."""
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
        scale_starts=starts_of(n),
        scales=tails[ragged_index(scales_at, n)],
        exponent=sums[:, 0] - BINS_OFFSET,
        signal=moments[:, 0].copy(),
        error=moments[:, 1].copy(),
        row_starts=starts_of(np.bincount(row, minlength=n_rows).astype(np.int64)),
    )
