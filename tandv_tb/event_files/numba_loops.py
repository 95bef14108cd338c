"""The compiled (numba) loops of the event-file format: varints and stored records.

Apart from the modules that call them, so that importing the format (as TensorBoard's
plugin process does at start) does not load numba: they import this module on first use.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def leb128(bits):
    """Each value 7 bits a byte, low bits first, the high bit set on all but its last byte."""
    out = np.empty(len(bits) * 10, dtype=np.uint8)
    n = 0
    for value in bits:
        while value >= 0x80:
            out[n] = (value & 0x7F) | 0x80
            value >>= 7
            n += 1
        out[n] = value
        n += 1
    return out[:n]


@numba.njit(cache=True, nogil=True)
def unleb128(data, sizes):
    """``leb128`` undone part by part: (values as uint64, values per part, status), status
    0 when every part ends with a whole varint, 1 when one is cut off, 2 when a varint has
    more than 10 bytes."""
    values = np.empty(len(data), dtype=np.uint64)  # at most one value a byte
    counts = np.zeros(len(sizes), dtype=np.int64)
    n = pos = 0
    for part in range(len(sizes)):
        end = pos + sizes[part]
        while pos < end:
            value = np.uint64(0)
            shift = 0
            while True:
                if pos == end:
                    return values[:0], counts, 1
                if shift == 70:
                    return values[:0], counts, 2
                byte = np.uint64(data[pos])
                pos += 1
                value |= (byte & np.uint64(0x7F)) << np.uint64(shift)
                shift += 7
                if byte < 0x80:
                    break
            values[n] = value
            n += 1
            counts[part] += 1
    return values[:n], counts, 0


#: The columns of ``scan_records``'s body facts.
NEGATIVE_BINS, BIN_SUM, NEGATIVE_CASTS, STAT_MIN, STAT_MAX = range(5)


@numba.njit(cache=True, nogil=True)
def scan_records(data, sizes, n_formats, header_len, n_stats, with_bins):
    """Records' varints decoded, row by row (``sizes[i]`` bytes, -1 for none), into the
    facts the format's rule (``record_columns``) judges and the parts of each row: (values
    per row (-1 for none or a cut or over-long varint), headers (zeros when shorter), body
    facts (``NEGATIVE_BINS``...), statistics' bit patterns, bin_starts, bins (if
    ``with_bins``), cast_starts, casts, tail_starts, tails: the values after the
    statistics); the last seven are zeros (none) for a row whose announced parts do not fit
    it. Each row is decoded into a small buffer, so the values are written once, where they
    belong."""
    n_rows = len(sizes)
    decoded = np.empty(max(sizes.max(), 0) if n_rows else 0, dtype=np.uint64)
    values = decoded.view(np.int64)
    n_values = np.full(n_rows, -1, dtype=np.int64)
    header = np.zeros((n_rows, header_len), dtype=np.int64)
    body = np.zeros((n_rows, 5), dtype=np.int64)
    stat_bits = np.zeros((n_rows, n_stats), dtype=np.int64)
    cast_starts = np.zeros(n_rows + 1, dtype=np.int64)
    for row in range(n_rows):
        cast_starts[row + 1] = cast_starts[row] + 2 * n_formats[row]
    casts = np.zeros(cast_starts[n_rows], dtype=np.int64)
    bin_starts = np.zeros(n_rows + 1, dtype=np.int64)
    bins = np.empty(len(data) if with_bins else 0, dtype=np.int64)  # at most one a byte
    tail_starts = np.zeros(n_rows + 1, dtype=np.int64)
    tails = np.empty(len(data), dtype=np.int64)
    pos = 0
    for row in range(n_rows):
        bin_starts[row + 1] = bin_starts[row]
        tail_starts[row + 1] = tail_starts[row]
        if sizes[row] < 0:
            continue
        end = pos + sizes[row]
        # A row whose last byte continues a varint is cut; otherwise no varint runs past end.
        whole = sizes[row] == 0 or data[end - 1] < 0x80
        n = 0
        while pos < end and whole:
            byte = data[pos]
            pos += 1
            if byte < 0x80:  # most values fit in one byte
                decoded[n] = byte
                n += 1
                continue
            value = np.uint64(byte & 0x7F)
            shift = 0
            while byte >= 0x80:
                shift += 7
                if shift == 70:  # more than 10 bytes
                    whole = False
                    break
                byte = data[pos]
                pos += 1
                value |= np.uint64(byte & 0x7F) << np.uint64(shift)
            decoded[n] = value
            n += 1
        pos = end
        if not whole:
            continue
        n_values[row] = n
        if n < header_len:
            continue
        for k in range(header_len):  # explicit loops: numba's slice copy costs ~100 ns each
            header[row, k] = values[k]
        n_bins, n_casts = header[row, header_len - 1], 2 * n_formats[row]
        if n_bins < 0 or n_bins > n or header_len + n_bins + n_casts + n_stats > n:
            continue
        at = header_len
        negative = total = 0
        for k in range(n_bins):
            total += values[at + k]
            negative += values[at + k] < 0
            if with_bins:
                bins[bin_starts[row] + k] = values[at + k]
        body[row, BIN_SUM], body[row, NEGATIVE_BINS] = total, negative
        bin_starts[row + 1] += n_bins
        at += n_bins
        negative = 0
        for k in range(n_casts):
            negative += values[at + k] < 0
            casts[cast_starts[row] + k] = values[at + k]
        body[row, NEGATIVE_CASTS] = negative
        at += n_casts
        low = high = values[at]
        for k in range(n_stats):
            low, high = min(low, values[at + k]), max(high, values[at + k])
            stat_bits[row, k] = values[at + k]
        body[row, STAT_MIN], body[row, STAT_MAX] = low, high
        at += n_stats
        for k in range(n - at):
            tails[tail_starts[row] + k] = values[at + k]
        tail_starts[row + 1] += n - at
    bins = bins[: bin_starts[n_rows]] if with_bins else bins
    tails = tails[: tail_starts[n_rows]]
    return (
        n_values, header, body, stat_bits, bin_starts, bins, cast_starts, casts, tail_starts,
        tails,
    )  # fmt: skip
