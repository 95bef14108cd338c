"""Events read from ``event_scan``'s arrays (compiled, numba) instead of protobuf.

Imported by the reader when it reads a file, so that importing the reader (as the
TensorBoard plugin does at start) does not load numba.
"""

from __future__ import annotations

import numpy as np
from google.protobuf.message import DecodeError
from tensorboard.compat.proto import summary_pb2, types_pb2

from tandv_tb.disk.chunk_values import ChunkValues
from tandv_tb.disk.event_scan import intern_tags, scan_events
from tandv_tb.disk.metadata import PLUGIN_NAME
from tandv_tb.disk.tag_table import TagTable


class FastEvents:
    """The events of a chunk whose values are all numerics stored vectors, read from
    ``event_scan``'s arrays without protobuf (the others are parsed with protobuf). Events
    are taken in file order, one per ``take``."""

    def __init__(self, buffer: np.ndarray, bodies: list[tuple[int, int]], table: TagTable):
        self._table = table
        self._next = 0
        starts = np.array([b[0] for b in bodies], dtype=np.int64)
        ends = np.array([b[1] for b in bodies], dtype=np.int64)
        self._scan = scan = scan_events(buffer, starts, ends)
        self._buffer = buffer
        names, self._local = intern_tags(buffer, scan)
        self._names = names
        self._to_table = np.array([_or_minus_one(table.index(n)) for n in names], dtype=np.int64)
        self._bounds = np.searchsorted(scan.event, np.arange(len(bodies) + 1))
        self._vector = (scan.dtype == types_pb2.DT_UINT8) & (scan.n_dims == 1)
        self._vector &= scan.dim0 == scan.content_len
        self._numerics = np.zeros(0, dtype=bool)

    def take(self, values: ChunkValues) -> int | None:
        """The step of the next event if its values were taken, else None (parse it)."""
        event, self._next = self._next, self._next + 1
        if not self._scan.ok[event]:
            return None
        low, high = self._bounds[event], self._bounds[event + 1]
        tags = self._to_table[self._local[low:high]]
        if (tags < 0).any():
            self._register(low, high)
            tags = self._to_table[self._local[low:high]]
        if len(self._numerics) < len(self._table):
            self._numerics = np.array([i is not None for i in self._table.infos], dtype=bool)
        if (tags < 0).any() or not self._numerics[tags].all() or not self._vector[low:high].all():
            return None
        scan = self._scan
        values.add_fast(
            tags,
            scan.content_start[low:high],
            scan.content_len[low:high],
            int(scan.step[event]),
            float(scan.wall_time[event]),
        )
        return int(scan.step[event])

    def _register(self, low: int, high: int) -> None:
        """Register the event's new tags of this plugin from their metadata."""
        scan = self._scan
        for value in range(low, high):
            local = self._local[value]
            if self._to_table[local] >= 0 or scan.meta_start[value] < 0:
                continue
            start, length = scan.meta_start[value], scan.meta_len[value]
            try:
                metadata = summary_pb2.SummaryMetadata.FromString(
                    self._buffer[start : start + length].tobytes()
                )
            except DecodeError:
                continue
            if metadata.plugin_data.plugin_name == PLUGIN_NAME:
                index = self._table.add(self._names[local], metadata.plugin_data.content)
                self._to_table[local] = index


def _or_minus_one(index: int | None) -> int:
    return -1 if index is None else index
