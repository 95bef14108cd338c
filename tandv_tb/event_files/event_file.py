"""An append-only TensorBoard event file, written in the caller's thread.

Each ``Event`` is framed as TensorBoard's readers expect (``tandv_tb.event_files.framing``)
and appended with one ``write`` to the file, opened for that write alone. So every event reaches the
operating system before ``write`` returns (a killed process loses nothing written; a
crash mid-write leaves at most a half-written last record, which readers skip), and an
error of the disk (ENOSPC) is raised to the caller at once.

Why not TensorBoard's ``EventFileWriter``: its records are checksummed in pure Python in a
background thread that holds the interpreter lock for about 0.4 us a byte, which was a
third of a tracked step's writing cost. ``google_crc32c`` computes the same checksum in C.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import time

from tensorboard.compat.proto import event_pb2

from tandv_tb.event_files.framing import frame

_SEQUENCE = itertools.count()
#: The first event of every file: the format version TensorBoard's readers check.
FILE_VERSION = "brain.Event:2"


def file_name_stem() -> str:
    """``events.out.tfevents.<time>.<host>.<pid>.<n>``: TensorBoard's name for a new event
    file, ``n`` counted in this process (so that two files made in the same second by the
    same process never take one name)."""
    return (
        f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}."
        f"{os.getpid()}.{next(_SEQUENCE)}"
    )


class EventFile:
    """A new event file in ``logdir`` (created with the directory if need be), named as
    TensorBoard names its own plus a suffix, ``events.out.tfevents.<time>.<host>.<pid>.<n>
    .tandv``, so that it never takes the name of a ``SummaryWriter``'s file made in the same
    second by the same process (whose counter also starts at 0)."""

    def __init__(self, logdir: str) -> None:
        os.makedirs(logdir, exist_ok=True)
        name = file_name_stem() + ".tandv"
        self.logdir = logdir
        self.path = os.path.join(logdir, name)
        with open(self.path, "xb"):
            pass
        try:
            self.write(event_pb2.Event(wall_time=time.time(), file_version=FILE_VERSION))
        except OSError:
            with contextlib.suppress(OSError):  # no litter of empty files on a full disk
                os.remove(self.path)
            raise

    def write(self, event: event_pb2.Event) -> None:
        """Append one event (raises the disk's error, if any)."""
        record = frame(event.SerializeToString())
        with open(self.path, "ab", buffering=0) as file:
            written = file.write(record)
        if written != len(record):
            raise OSError(f"wrote {written} of {len(record)} bytes to {self.path}")
