"""Byte ranges: a file's bytes read by range (``ByteSource``; ``LocalBytes`` for a local
file, ``locations.RemoteBytes`` for an object), ranges gathered from a buffer (a
memory-mapped local file, the bytes a range request brought), and the indices of ragged
ranges, for the storage's range reads and the event-file format's columnar decoding."""

from __future__ import annotations

from typing import Protocol

import numpy as np

#: Inputs up to this many bytes are handled in numpy: numba's first call in a process costs
#: about 1 s of CPU, far more than numpy takes on a few MB (``tandv_tb.event_files.small_loops``
#: says more); larger ones in one compiled pass (``kernels``).
SMALL_BYTES = 4 << 20


def gather_ranges(
    data: np.ndarray,
    starts: np.ndarray,
    sizes: np.ndarray,
    *,
    out: np.ndarray | None = None,
    out_starts: np.ndarray | None = None,
) -> np.ndarray:
    """The byte ranges ``data[starts[i]:starts[i] + sizes[i]]`` laid end to end, or each
    written at ``out[out_starts[i]:]``: small inputs by numpy indexing,
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
    if sizes.sum() <= SMALL_BYTES:  # numba's first call costs more
        out[ragged_index(out_starts, sizes)] = data[ragged_index(starts, sizes)]
        return out
    from tandv_tb.filesystems import numba_loops  # numba: loaded on first use

    numba_loops.gather(data, starts, sizes, out, out_starts)
    return out


def ragged_index(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Indices ``starts[i] + k`` for ``k < lengths[i]``, concatenated over i."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    return np.arange(total, dtype=np.int64) + offsets


def starts_of(lengths: np.ndarray) -> np.ndarray:
    """The start of each of consecutive ranges of ``lengths``, and their end (int64)."""
    return np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)


def segment_sums(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The sums of ``values[starts[i]:starts[i + 1]]`` (int64, wrapping as the kernel's)."""
    return np.diff(np.concatenate(([0], np.cumsum(values, dtype=np.int64)))[starts])


class ByteSource(Protocol):
    """A file's bytes, read by range (``event_reader.read_chunk`` reads through it)."""

    name: str  # the file as messages name it

    def read(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``offset`` (fewer at the end; none past it);
        ``OSError`` where the file cannot be read."""


class LocalBytes:
    """A local file, opened for each read (a growing file is read as it is then)."""

    def __init__(self, path: str):
        self.name = path

    def read(self, offset: int, size: int) -> bytes:
        with open(self.name, "rb") as file:
            file.seek(offset)
            return file.read(size)
