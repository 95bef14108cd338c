"""numpy versions of the compiled loops (``kernels``) for small inputs.

numba's first call in a process costs about 1 s of CPU (it imports itself and sets up its
CPU target, even when the compiled code is cached), far more than these loops take in
numpy on a few MB. So a short command (``tandv-tb findings`` on a built store) or a
server's first histogram never loads numba; reading event files in bulk still does.
"""

from __future__ import annotations

import numpy as np

from tandv_tb.filesystems import ranges

#: Inputs up to this many bytes take the numpy loops (about 10-20 ms a MB; their
#: temporary arrays take at most about 40 bytes a byte): the storage's threshold.
SMALL_BYTES = ranges.SMALL_BYTES
_MAX_VARINT_BYTES = 10  # 64 bits, 7 a byte


def unleb128(data: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``numba_loops.unleb128`` for well-formed input: (values as uint64, values per part), or
    None when a part's last varint is cut off or a varint is too long (the compiled loop
    then says which comes first)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    ends = np.cumsum(sizes)
    total = int(ends[-1]) if len(ends) else 0
    data = np.asarray(data[:total])
    last = data < 0x80  # a varint's last byte
    if not last[ends[sizes > 0] - 1].all():
        return None
    value_ends = np.flatnonzero(last)
    value_starts = np.zeros_like(value_ends)
    value_starts[1:] = value_ends[:-1] + 1
    lengths = value_ends + 1 - value_starts
    longest = int(lengths.max()) if len(lengths) else 0
    if longest > _MAX_VARINT_BYTES:
        return None
    values = (data[value_starts] & 0x7F).astype(np.uint64)
    for k in range(1, longest):  # the k-th byte of every varint that has one
        longer = np.flatnonzero(lengths > k)
        payload = (data[value_starts[longer] + k] & 0x7F).astype(np.uint64)
        values[longer] |= payload << np.uint64(7 * k)
    ended = np.searchsorted(value_ends, np.concatenate(([0], ends)))  # varints before
    return values, np.diff(ended)
