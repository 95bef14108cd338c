"""The compiled (numba) loops of the disk format: varints, stored records and byte gathering.

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


@numba.njit(cache=True, nogil=True)
def gather(data, starts, sizes, out, out_starts):
    for i in range(len(starts)):
        out[out_starts[i] : out_starts[i] + sizes[i]] = data[starts[i] : starts[i] + sizes[i]]


#: The columns of ``scan_records``'s body facts.
NEGATIVE_BINS, BIN_SUM, NEGATIVE_CASTS, STAT_MIN, STAT_MAX = range(5)


@numba.njit(cache=True, nogil=True)
def scan_records(data, sizes, n_formats, header_len, n_stats):
    """Records' varints decoded, row by row (``sizes[i]`` bytes, -1 for none), and the
    facts the format's rule (``record_columns``) judges: (values as int64, each row's first
    value, values per row (-1 for none or a cut or over-long varint), headers (zeros when
    shorter), body facts (``NEGATIVE_BINS``...; zeros unless the announced parts fit))."""
    n_rows = len(sizes)
    decoded = np.empty(len(data), dtype=np.uint64)  # at most one value a byte
    flat = decoded.view(np.int64)
    starts = np.zeros(n_rows, dtype=np.int64)
    n_values = np.full(n_rows, -1, dtype=np.int64)
    header = np.zeros((n_rows, header_len), dtype=np.int64)
    body = np.zeros((n_rows, 5), dtype=np.int64)
    pos = n = 0
    for row in range(n_rows):
        starts[row] = n
        if sizes[row] < 0:
            continue
        end = pos + sizes[row]
        # A row whose last byte continues a varint is cut; otherwise no varint runs past end.
        whole = sizes[row] == 0 or data[end - 1] < 0x80
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
            n = starts[row]
            continue
        first, count = starts[row], n - starts[row]
        n_values[row] = count
        if count < header_len:
            continue
        for k in range(header_len):  # explicit loops: numba's slice copy costs ~100 ns each
            header[row, k] = flat[first + k]
        n_bins, n_casts = header[row, header_len - 1], 2 * n_formats[row]
        if n_bins < 0 or n_bins > count or header_len + n_bins + n_casts + n_stats > count:
            continue
        at = first + header_len
        negative = total = 0
        for k in range(at, at + n_bins):
            total += flat[k]
            negative += flat[k] < 0
        body[row, BIN_SUM], body[row, NEGATIVE_BINS] = total, negative
        at += n_bins
        negative = 0
        for k in range(at, at + n_casts):
            negative += flat[k] < 0
        body[row, NEGATIVE_CASTS] = negative
        at += n_casts
        low = high = flat[at]
        for k in range(at + 1, at + n_stats):
            low, high = min(low, flat[k]), max(high, flat[k])
        body[row, STAT_MIN], body[row, STAT_MAX] = low, high
    return flat[:n], starts, n_values, header, body


@numba.njit(cache=True, nogil=True)
def gather_rows(flat, starts, header, n_formats, kept, bins_offset, n_stats, with_bins):
    """The parts of the ``kept`` rows of ``scan_records``: (bins_lo, bin_starts, bins (empty
    unless ``with_bins``), cast_starts, casts, statistics' bit patterns)."""
    header_len = header.shape[1]
    n_kept = len(kept)
    bin_starts = np.zeros(n_kept + 1, dtype=np.int64)
    cast_starts = np.zeros(n_kept + 1, dtype=np.int64)
    for i in range(n_kept):
        bin_starts[i + 1] = bin_starts[i] + header[kept[i], header_len - 1]
        cast_starts[i + 1] = cast_starts[i] + 2 * n_formats[kept[i]]
    bins_lo = np.zeros(n_kept, dtype=np.int64)
    bins = np.empty(bin_starts[n_kept] if with_bins else 0, dtype=np.int64)
    casts = np.empty(cast_starts[n_kept], dtype=np.int64)
    stat_bits = np.empty((n_kept, n_stats), dtype=np.int64)
    for i in range(n_kept):
        row = kept[i]
        n_bins = bin_starts[i + 1] - bin_starts[i]
        n_casts = cast_starts[i + 1] - cast_starts[i]
        if n_bins > 0:
            bins_lo[i] = header[row, header_len - 2] - bins_offset
        at = starts[row] + header_len  # explicit loops: numba's slice copy costs ~100 ns each
        if with_bins:
            for k in range(n_bins):
                bins[bin_starts[i] + k] = flat[at + k]
        at += n_bins
        for k in range(n_casts):
            casts[cast_starts[i] + k] = flat[at + k]
        at += n_casts
        for k in range(n_stats):
            stat_bits[i, k] = flat[at + k]
    return bins_lo, bin_starts, bins, cast_starts, casts, stat_bits
