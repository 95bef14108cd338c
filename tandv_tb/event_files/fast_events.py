"""Events read from ``event_scan``'s arrays (compiled, numba) instead of protobuf.

Imported by the reader when it reads a file, so that importing the reader (as the
TensorBoard plugin does at start) does not load numba.
"""

from __future__ import annotations

import numpy as np
from google.protobuf.message import DecodeError
from tensorboard.compat.proto import summary_pb2, types_pb2

from tandv_tb.event_files.chunk_values import ChunkValues
from tandv_tb.event_files.event_scan import scan_events
from tandv_tb.event_files.metadata import PLUGIN_NAME
from tandv_tb.event_files.tag_intern import intern_tags
from tandv_tb.event_files.tag_table import TagTable


class FastEvents:
    """The events of a chunk whose values are all numerics stored vectors, read from
    ``event_scan``'s arrays without protobuf, all at once (``take_all``); the others are
    parsed with protobuf by the caller.

    A tag is known from its metadata, in its first record: a value counts as known only
    from the event that registered its tag on (``registered``), as when events are read
    one by one."""

    def __init__(self, buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray, table: TagTable):
        self._table = table
        self._scan = scan = scan_events(buffer, starts, ends)
        self._buffer = buffer
        self._n_events = len(starts)
        names, self._local = intern_tags(buffer, scan)
        self._names = names
        self._to_table = np.array([_or_minus_one(table.index(n)) for n in names], dtype=np.int64)
        self._bounds = np.searchsorted(scan.event, np.arange(len(starts) + 1))
        self._vector = (scan.dtype == types_pb2.DT_UINT8) & (scan.n_dims == 1)
        self._vector &= scan.dim0 == scan.content_len
        #: table index -> the event that registered it, for tags registered in this chunk
        self.registered: dict[int, int] = {}

    @property
    def steps(self) -> np.ndarray:
        """Each event's step (0 for an event the scan declined)."""
        return self._scan.step

    def take_all(self, values: ChunkValues) -> np.ndarray:
        """Register the tags of this plugin met in the events (in event order), add the
        values of every event that needs no protobuf to ``values``; which events were
        taken (bool per event)."""
        scan = self._scan
        registered_at = np.full(len(self._names), -1, dtype=np.int64)
        unknown = self._to_table[self._local] < 0
        for event in np.unique(scan.event[unknown]).tolist():
            low, high = self._bounds[event], self._bounds[event + 1]
            if (self._to_table[self._local[low:high]] < 0).any():
                for local in self._register(low, high):
                    registered_at[local] = event
                    self.registered[int(self._to_table[local])] = event
        tags = self._to_table[self._local]
        numerics = np.array([i is not None for i in self._table.infos] + [False], dtype=bool)
        usable = (tags >= 0) & (scan.event >= registered_at[self._local])
        usable &= numerics[tags] & self._vector  # tags of -1 read the appended False
        refused = np.bincount(scan.event[~usable], minlength=self._n_events)
        taken = scan.ok.astype(bool) & (refused == 0)
        chosen = np.flatnonzero(taken[scan.event])
        events = scan.event[chosen]
        values.add_fast(
            events,
            tags[chosen],
            scan.step[events],
            scan.wall_time[events],
            scan.content_start[chosen],
            scan.content_len[chosen],
        )
        return taken

    def _register(self, low: int, high: int) -> list[int]:
        """Register the event's new tags of this plugin from their metadata: their local
        ids."""
        scan = self._scan
        found = []
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
                found.append(local)
        return found


def _or_minus_one(index: int | None) -> int:
    return -1 if index is None else index
