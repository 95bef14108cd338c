"""Event files on storage that cannot append (S3, GCS, Azure and other object stores): each
flush writes the events since the last one as a new event file object of the run.

An object is written whole or not at all (one PUT), so every object is a complete event
file (its first event the file version, as in every event file) and a killed process loses
only what it had not flushed. Objects of one writer are named
``events.out.tfevents.<time>.<host>.<pid>.<n>.<part>.tandv`` with ``part`` counted from
000000: names sort in write order, which is the order TensorBoard's readers read the event
files of a run in (both loaders read every file of a run in name order; the Python loader
never goes back to a file that sorts before the one it reads), and a later writer's objects
sort after an earlier one's (``<time>`` first).
"""

from __future__ import annotations

import time

from tensorboard.compat.proto import event_pb2

from tandv_tb.event_files.event_file import FILE_VERSION, file_name_stem
from tandv_tb.event_files.framing import frame
from tandv_tb.filesystems.locations import storage_error

#: Bytes of events held before they are written out without waiting for a flush.
MAX_PENDING_BYTES = 64 << 20


class EventObjects:
    """New event file objects under ``url`` (an fsspec URL), one per ``flush``."""

    def __init__(self, url: str) -> None:
        from tandv_tb.filesystems.locations import filesystem

        self.logdir = url
        self._fs, path = filesystem(url)
        self._folder = path.rstrip("/")
        self._stem = file_name_stem()
        self._part = 0
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self.pending_events = 0

    @property
    def path(self) -> str:
        """The URL of the next object."""
        return self._fs.unstrip_protocol(self._object(self._part))

    def write(self, event: event_pb2.Event) -> None:
        """Keep one event for the next flush (written at once past ``MAX_PENDING_BYTES``)."""
        record = frame(event.SerializeToString())
        self._pending.append(record)
        self._pending_bytes += len(record)
        self.pending_events += 1
        if self._pending_bytes >= MAX_PENDING_BYTES:
            self.flush()

    def flush(self) -> None:
        """Write the events kept since the last flush as one new object (nothing when
        there are none); ``StorageError`` where it could not be written (they are kept)."""
        if not self._pending:
            return
        version = event_pb2.Event(wall_time=time.time(), file_version=FILE_VERSION)
        data = b"".join([frame(version.SerializeToString()), *self._pending])
        path = self._object(self._part)
        try:
            self._fs.pipe_file(path, data)
        except Exception as error:  # an SDK's own error types: named in the message
            raise storage_error(self._fs.unstrip_protocol(path), error, "write") from None
        self._part += 1
        self.discard()

    def discard(self) -> None:
        """Forget the events kept (after a failed write the writer drops them)."""
        self._pending, self._pending_bytes, self.pending_events = [], 0, 0

    def _object(self, part: int) -> str:
        return f"{self._folder}/{self._stem}.{part:06d}.tandv"
