"""Numerics records from event files, every readable one, whatever the damage.

An event file is a sequence of records: ``uint64 length``, ``uint32 masked crc32c(length)``,
``data`` (an ``Event`` proto), ``uint32 masked crc32c(data)``. Damage is never fatal:

- a cut-short last record (the normal state of a file after a crash) is skipped;
- a record whose data fails its checksum is skipped, and reading goes on at the next record
  (the header, checked by its own checksum, still gives the length);
- after a header that fails its checksum (flipped bytes, a zero-filled tail), reading goes
  on at the next offset where a whole record passes both checksums;
- tags of this plugin that hold no numerics (the non-finite watch's record, read by
  ``tandv_tb.nonfinite``) are passed over silently;
- an event that is not an ``Event`` proto, the records of a tag whose metadata is unreadable,
  from a newer tandv_tb or lost (in a damaged first record), and a record whose tensor is
  not a numerics vector (wrong shape, dtype or content) are skipped; so is a file that
  cannot be opened.

Every skip is reported with ``warnings.warn(message, DataWarning)`` (filter it, or make it
an error with ``warnings.simplefilter("error", DataWarning)``). The message names the file,
the reason and, where the damage lets it be known, the tag and step; for damaged bytes, the
byte range and the steps of the readable records around it. A refused tag is reported once.
"""

from __future__ import annotations

import dataclasses
import os
import re
import struct
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from google.protobuf.message import DecodeError
from tensorboard.compat.proto import event_pb2
from tensorboard.util import tensor_util

from tandv_tb.event_file import masked_crc32c
from tandv_tb.metadata import PLUGIN_NAME, NotNumerics, TagInfo, parse_plugin_metadata
from tandv_tb.stats.record import NumericsRecord
from tandv_tb.summary import decode_tensor

_HEADER, _FOOTER = 12, 4  # length + its crc; data crc
_LENGTH, _CRC = struct.Struct("<Q"), struct.Struct("<I")
_NONZERO = re.compile(rb"[^\x00]")
_TAG_PREFIX = f"{PLUGIN_NAME}/"
_NOT_NUMERICS = "not numerics"  # a tag passed over without a warning


class DataWarning(UserWarning):
    """Some stored numerics could not be read (damaged file, newer version, bad record)."""


@dataclasses.dataclass
class _Damage:
    """Bytes ``start:end`` of a file hold no readable record."""

    start: int
    end: int
    reason: str


def _crc_at(data: bytes, offset: int) -> int:
    return _CRC.unpack_from(data, offset)[0]


def _record_at(data: bytes, offset: int) -> int | None:
    """The end of the whole, checksum-valid record starting at ``offset``, else None."""
    if len(data) - offset < _HEADER + _FOOTER:
        return None
    if masked_crc32c(data[offset : offset + 8]) != _crc_at(data, offset + 8):
        return None
    end = offset + _HEADER + _LENGTH.unpack_from(data, offset)[0] + _FOOTER
    if end > len(data) or masked_crc32c(data[offset + _HEADER : end - _FOOTER]) != _crc_at(
        data, end - _FOOTER
    ):
        return None
    return end


def _next_record(data: bytes, offset: int) -> int:
    """The first offset from ``offset`` on where a whole valid record starts (else the end)."""
    while offset < len(data) - _HEADER - _FOOTER + 1:
        if data[offset : offset + _HEADER] == bytes(_HEADER):  # never a valid header
            found = _NONZERO.search(data, offset)
            if found is None:
                break
            offset = max(offset + 1, found.start() - _HEADER + 1)
            continue
        if _record_at(data, offset) is not None:
            return offset
        offset += 1
    return len(data)


def _records(data: bytes) -> Iterator[bytes | _Damage]:
    """The data of every valid record of an event file, and a ``_Damage`` for each gap."""
    offset, size = 0, len(data)
    while offset < size:
        if size - offset < _HEADER:
            yield _Damage(offset, size, "the last record is truncated (in its header)")
            return
        if masked_crc32c(data[offset : offset + 8]) != _crc_at(data, offset + 8):
            resume = _next_record(data, offset + 1)
            yield _Damage(offset, resume, "damaged: a record header fails its checksum")
            offset = resume
            continue
        end = offset + _HEADER + _LENGTH.unpack_from(data, offset)[0] + _FOOTER
        if end > size:
            yield _Damage(offset, size, "the last record is truncated (as after a crash)")
            return
        body = data[offset + _HEADER : end - _FOOTER]
        if masked_crc32c(body) != _crc_at(data, end - _FOOTER):
            yield _Damage(offset, end, "damaged: a record's data fails its checksum")
        else:
            yield body
        offset = end


def _warn(message: str) -> None:
    warnings.warn(message, DataWarning, stacklevel=2)


def _report(path: Path, size: int, damage: _Damage, before: int | None, after: int | None):
    where = [f"after step {before}" if before is not None else "before the first record"]
    if after is not None:
        where.append(f"before step {after}")
    _warn(
        f"{path}: {damage.reason}: skipped bytes {damage.start}-{damage.end} of {size} "
        f"({' and '.join(where)}); every other record is read"
    )


def _tensor_values(tensor) -> np.ndarray:
    """The ndarray of a stored tensor, refusing shapes no numerics vector has (before
    ``make_ndarray`` could allocate a huge array for a damaged shape)."""
    dims = [d.size for d in tensor.tensor_shape.dim]
    if len(dims) != 1 or not 0 <= dims[0] <= max(tensor.ByteSize(), 1):
        raise ValueError(f"a numerics tensor is a short 1-D vector, got shape {dims}")
    try:
        return tensor_util.make_ndarray(tensor)
    except (TypeError, ValueError) as error:
        raise ValueError(f"unreadable tensor ({error})") from None


def _tag_info(metadata) -> TagInfo | Exception | str | None:
    if metadata.plugin_data.plugin_name != PLUGIN_NAME:
        return None
    try:
        return parse_plugin_metadata(metadata.plugin_data.content)
    except NotNumerics:
        return _NOT_NUMERICS
    except ValueError as error:  # UnsupportedVersion included
        return error


def _records_in_file(
    path: Path, tags: dict[str, TagInfo | Exception | str | None]
) -> Iterator[tuple[TagInfo, int, NumericsRecord]]:
    """Every numerics record of one event file; ``tags`` carries metadata across files."""
    try:
        data = path.read_bytes()
    except OSError as error:
        _warn(f"{path}: skipped the file, it cannot be read ({error})")
        return
    refused: set[str] = set()
    pending: list[_Damage] = []  # reported once the next readable step is known
    step: int | None = None
    for item in _records(data):
        if isinstance(item, _Damage):
            pending.append(item)
            continue
        try:
            event = event_pb2.Event.FromString(item)
        except DecodeError:
            _warn(f"{path}: skipped an event that is not a valid Event proto (after step {step})")
            continue
        for damage in pending:
            _report(path, len(data), damage, step, event.step)
        pending, step = [], event.step
        for value in event.summary.value:
            if value.HasField("metadata"):
                tags.setdefault(value.tag, _tag_info(value.metadata))
            info = tags.get(value.tag)
            if info is _NOT_NUMERICS:
                continue
            if info is None:
                if value.tag.startswith(_TAG_PREFIX) and value.tag not in refused:
                    refused.add(value.tag)
                    _warn(
                        f"{path}: skipped the records of tag {value.tag!r} from step "
                        f"{event.step}: its metadata (in the tag's first record) was not read"
                    )
                continue
            if isinstance(info, Exception):
                if value.tag not in refused:
                    refused.add(value.tag)
                    _warn(f"{path}: skipped the records of tag {value.tag!r}: {info}")
                continue
            try:
                record = decode_tensor(_tensor_values(value.tensor), info)
            except ValueError as error:
                _warn(
                    f"{path}: skipped a malformed record of {value.tag!r} at step "
                    f"{event.step}: {error}"
                )
                continue
            yield info, event.step, record
    for damage in pending:
        _report(path, len(data), damage, step, None)


def _runs(logdir: Path) -> dict[str, list[Path]]:
    """Event files by run, the run named as TensorBoard names it ("." for logdir)."""
    runs: dict[str, list[Path]] = {}
    for directory, subdirs, files in os.walk(logdir):
        subdirs.sort()
        events = sorted(f for f in files if "tfevents" in f)
        if events:
            run = os.path.relpath(directory, logdir).replace(os.sep, "/")
            runs[run] = [Path(directory) / f for f in events]
    return runs


def read_records(
    logdir: str | os.PathLike, run: str | None = None
) -> Iterator[tuple[str, TagInfo, int, NumericsRecord]]:
    """``(run, tag_info, step, record)`` for every readable numerics record under
    ``logdir``; what cannot be read is skipped with a ``DataWarning`` (see the module doc)."""
    root = Path(logdir)
    if not root.is_dir():
        raise FileNotFoundError(f"no such log directory: {str(root)!r}")
    runs = _runs(root)
    if run is not None:
        if run not in runs:
            raise ValueError(f"no run {run!r} under {str(root)!r}; runs: {sorted(runs)}")
        runs = {run: runs[run]}
    for name, files in runs.items():
        tags: dict[str, TagInfo | Exception | str | None] = {}
        for path in files:
            for info, step, record in _records_in_file(path, tags):
                yield name, info, step, record
