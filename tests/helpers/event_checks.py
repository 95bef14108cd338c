"""Reading back event files strictly: every record whole (both CRCs), TensorBoard's own
loader reading them all, ``read_frame`` warning about nothing but a half-written last record
(shared by the crash-safety and concurrency tests)."""

from __future__ import annotations

import struct
import warnings
from pathlib import Path

import pandas as pd
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

from tandv_tb import DataWarning, read_frame
from tests.helpers.event_io import event_files


def check_event_file(path: Path) -> bool:
    """Assert every record of ``path`` is whole (both CRCs right) up to at most one
    half-written record at the end, and that TensorBoard's loader reads them all.
    True where the file ends in a half-written record."""
    data = path.read_bytes()
    position = complete = 0
    while len(data) - position >= 12:
        header = data[position : position + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", data[position + 8 : position + 12])
        assert header_crc == masked_crc32c(header), f"{path}: bad length CRC at {position}"
        end = position + 12 + length + 4
        if end > len(data):
            break  # the record being written when the process died
        (data_crc,) = struct.unpack("<I", data[end - 4 : end])
        assert data_crc == masked_crc32c(data[position + 12 : end - 4]), f"{path}: bad CRC"
        position, complete = end, complete + 1
    events = list(EventFileLoader(str(path)).Load())
    assert len(events) == complete, f"{path}: TensorBoard read {len(events)} of {complete}"
    if events:
        assert events[0].file_version == "brain.Event:2"
    return position != len(data)


def read_checked(logdir: Path, run: str | None = None) -> pd.DataFrame:
    """``read_frame(logdir)`` after checking every event file; its only warnings may be
    about a half-written last record."""
    truncated = [check_event_file(path) for path in event_files(logdir)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frame = read_frame(logdir, run=run)
    for warning in caught:
        assert issubclass(warning.category, DataWarning), warning
        assert "truncated" in str(warning.message), warning
    assert len(caught) <= sum(truncated)
    return frame


def keys_by_step(frame: pd.DataFrame) -> dict[int, set[tuple[str, str]]]:
    """``step -> {(name, tensor_type)}`` of a frame."""
    meta = frame["metadata"]
    out: dict[int, set[tuple[str, str]]] = {}
    for name, tensor_type, step in zip(meta["name"], meta["tensor_type"], meta["step"]):
        out.setdefault(int(step), set()).add((name, tensor_type))
    return out
