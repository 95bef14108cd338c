"""The compiled (numba) loops of the disk format: varints and byte gathering.

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
