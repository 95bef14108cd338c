"""The one reader of numerics event files, for ``read_frame`` and the plugin's store.

An event file is a sequence of records: ``uint64 length``, ``uint32 masked crc32c(length)``,
``data`` (an ``Event`` proto), ``uint32 masked crc32c(data)``. ``read_chunk`` reads the
numerics values of one file from a byte offset on, so a growing file is read a piece at a
time, and returns them as flat arrays (no Python object per value beyond what protobuf
makes). Damage is never fatal:

- a cut-short last record is where reading stops: while a file may still grow (``final``
  false) it is the part a writer has not finished, read next time; otherwise (the normal
  state of a file after a crash) it is reported and skipped;
- a record whose data fails its checksum is skipped, and reading goes on at the next record
  (the header, checked by its own checksum, still gives the length);
- after a header that fails its checksum (flipped bytes, a zero-filled tail), reading goes
  on at the next offset where a whole record passes both checksums;
- tags of this plugin that hold no numerics are passed over silently, but the non-finite
  watch's record (``tandv_tb.disk.nonfinite``) is collected in ``Chunk.nonfinite``, and
  TensorBoard scalars (the loss) in ``Chunk.scalars``;
- an event that is not an ``Event`` proto, the values of a tag whose metadata is
  unreadable, from a newer tandv_tb or lost (in a damaged first record), and a value whose
  tensor is not a stored vector are skipped.

Each skip is described in ``Chunk.problems``: one sentence naming the file, the reason and,
where the damage lets it be known, the tag and step; for damaged bytes, the byte range and
the steps of the readable records around it. A refused tag is described once per table.
"""

from __future__ import annotations

import dataclasses
import os
import re
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from google.protobuf.message import DecodeError
from tensorboard.compat.proto import event_pb2, summary_pb2, types_pb2
from tensorboard.util import tensor_util

from tandv_tb.disk.event_file import masked_crc32c
from tandv_tb.disk.event_scan import intern_tags, scan_events
from tandv_tb.disk.metadata import (
    NONFINITE_KIND,
    PLUGIN_NAME,
    NotNumerics,
    TagInfo,
    parse_plugin_metadata,
    plugin_kind,
)
from tandv_tb.disk.nonfinite import NonfiniteEntry, decode_nonfinite
from tandv_tb.disk.record_columns import gather_ranges
from tandv_tb.disk.summary import encode_varints, stored_vector

_HEADER, _FOOTER = 12, 4  # length + its crc; data crc
_LENGTH, _CRC = struct.Struct("<Q"), struct.Struct("<I")
_NONZERO = re.compile(rb"[^\x00]")
_TAG_PREFIX = f"{PLUGIN_NAME}/"
_SCALARS_PLUGIN = "scalars"
#: Bytes read from a file at a time: a big file is read in pieces of about this size
#: (decoding a piece takes about 8 times its size in memory).
CHUNK_BYTES = 16 << 20


class TagTable:
    """What is known of one run's numerics tags, across its files and reads: each tag's
    metadata comes from its first record only (as TensorBoard keeps it)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.contents: list[bytes] = []  # each tag's plugin content, as stored
        self.infos: list[TagInfo | None] = []  # None: refused (``errors``) or ``kinds``
        self.errors: dict[str, str] = {}
        self.kinds: dict[str, str | None] = {}  # tags of this plugin that hold no numerics
        self.scalar_tags: set[str] = set()  # tags of TensorBoard's scalars plugin
        self._index: dict[str, int] = {}
        self._reported: set[str] = set()

    def __len__(self) -> int:
        return len(self.names)

    def index(self, tag: str) -> int | None:
        return self._index.get(tag)

    def add(self, tag: str, content: bytes) -> int:
        """Register a tag from its metadata's plugin content (a refused one gets None)."""
        found = self._index.get(tag)
        if found is not None:
            return found
        try:
            info: TagInfo | None = parse_plugin_metadata(content)
        except NotNumerics:
            info = None
            self.kinds[tag] = plugin_kind(content)
        except ValueError as error:  # UnsupportedVersion included
            info = None
            self.errors[tag] = str(error)
        self._index[tag] = len(self.names)
        self.names.append(tag)
        self.contents.append(bytes(content))
        self.infos.append(info)
        return self._index[tag]

    def refuse_once(self, tag: str) -> bool:
        """True the first time a refused tag is met (so that it is described once)."""
        if tag in self._reported:
            return False
        self._reported.add(tag)
        return True


@dataclasses.dataclass
class Chunk:
    """The numerics values read from one file between two offsets, in file order.

    Value i is tag ``tags[i]`` (an index into the run's ``TagTable``) at ``steps[i]``; its
    stored vector (varint bytes, see ``tandv_tb.disk.summary``) is the next ``sizes[i]`` bytes of
    ``contents``, or absent (``sizes[i] == -1``) when its tensor is not a stored vector. The
    same bytes lie at ``file_offsets[i]`` in the file, except for a vector that was
    re-encoded (an old version's; -1)."""

    end: int  # the offset up to which the file was read
    tags: np.ndarray  # int32[V]
    steps: np.ndarray  # int64[V]
    wall_times: np.ndarray  # float64[V]
    sizes: np.ndarray  # int64[V]
    contents: np.ndarray  # uint8[sum of the non-negative sizes]
    file_offsets: np.ndarray  # int64[V]: where each value's bytes lie in the file, -1: nowhere
    problems: list[str]
    nonfinite: list[tuple[int, list[NonfiniteEntry]]]  # (step, entries) of the watch
    scalars: list[tuple[str, int, float, float]]  # TensorBoard scalars: tag, step, time, value

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def offsets(self) -> np.ndarray:
        """Where each value's bytes start in ``contents``."""
        return np.concatenate(([0], np.cumsum(np.maximum(self.sizes, 0))[:-1])).astype(np.int64)


@dataclasses.dataclass
class _Damage:
    """Bytes ``start:end`` of a file hold no readable record."""

    start: int
    end: int
    reason: str


def _crc_at(data, offset: int) -> int:
    return _CRC.unpack_from(data, offset)[0]


def _record_end(data, offset: int) -> int | None:
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


def _next_record(data, offset: int) -> int | None:
    """The first offset from ``offset`` on where a whole valid record starts, else None."""
    while offset < len(data) - _HEADER - _FOOTER + 1:
        if data[offset : offset + _HEADER] == bytes(_HEADER):  # never a valid header
            found = _NONZERO.search(data, offset)
            if found is None:
                break
            offset = max(offset + 1, found.start() - _HEADER + 1)
            continue
        if _record_end(data, offset) is not None:
            return offset
        offset += 1
    return None


def _frames(data, final: bool):
    """``(start, end)`` of the data of every valid record, and a ``_Damage`` for each gap;
    finally the offset up to which ``data`` was consumed."""
    offset, size = 0, len(data)
    while offset < size:
        if size - offset < _HEADER:
            break
        if masked_crc32c(data[offset : offset + 8]) != _crc_at(data, offset + 8):
            resume = _next_record(data, offset + 1)
            if resume is None:  # maybe a record that is still being written
                break
            yield _Damage(offset, resume, "damaged: a record header fails its checksum")
            offset = resume
            continue
        end = offset + _HEADER + _LENGTH.unpack_from(data, offset)[0] + _FOOTER
        if end > size:
            break
        if masked_crc32c(data[offset + _HEADER : end - _FOOTER]) != _crc_at(data, end - _FOOTER):
            yield _Damage(offset, end, "damaged: a record's data fails its checksum")
        else:
            yield (offset + _HEADER, end - _FOOTER)
        offset = end
    if final and offset < size:
        if size - offset < _HEADER:
            reason = "the last record is truncated (in its header)"
        elif masked_crc32c(data[offset : offset + 8]) != _crc_at(data, offset + 8):
            reason = "damaged: a record header fails its checksum"
        else:
            reason = "the last record is truncated (as after a crash)"
        yield _Damage(offset, size, reason)
        offset = size
    yield offset


def read_chunk(
    path: str, offset: int, table: TagTable, *, final: bool, max_bytes: int = CHUNK_BYTES
) -> Chunk:
    """The numerics values of the file at ``path`` from byte ``offset`` on (up to about
    ``max_bytes``, always at least one whole record). With ``final`` the file is taken as
    complete, so a cut-short last record is damage rather than unfinished."""
    problems: list[str] = []
    try:
        with open(path, "rb") as file:
            file.seek(offset)
            data = file.read(max_bytes)
            if len(data) >= max_bytes and _record_end(data, 0) is None:
                data += _rest_of_first_record(file, data)
            at_end = not file.read(1)
    except OSError as error:
        return _empty(offset, [f"{path}: skipped the file, it cannot be read ({error})"])
    frames = list(_frames(data, final and at_end))
    consumed = frames.pop()
    buffer = np.frombuffer(data, dtype=np.uint8)
    bodies = [item for item in frames if not isinstance(item, _Damage)]
    fast = _FastEvents(buffer, bodies, table)
    values = _Values(buffer, offset)
    pending: list[_Damage] = []  # reported once the next readable step is known
    step: int | None = None
    for item in frames:
        if isinstance(item, _Damage):
            pending.append(item)
            continue
        event = None
        event_step = fast.take(values)
        if event_step is None:
            try:
                event = event_pb2.Event.FromString(data[item[0] : item[1]])
            except DecodeError:
                problems.append(
                    f"{path}: skipped an event that is not a valid Event proto (after step {step})"
                )
                continue
            event_step = event.step
        for damage in pending:
            problems.append(_damage_text(path, offset, damage, step, event_step))
        pending, step = [], event_step
        if event is not None:
            values.add_event(event, table, path, problems)
    if consumed == 0 and len(data) >= max_bytes:  # a whole piece without a record start
        consumed = len(data) // 2
        pending.append(_Damage(0, consumed, "damaged: no readable record"))
    for damage in pending:
        problems.append(_damage_text(path, offset, damage, step, None))
    return values.chunk(offset + consumed, problems)


def event_runs(logdir: Path) -> dict[str, list[Path]]:
    """Event files by run, the run named as TensorBoard names it ("." for logdir)."""
    runs: dict[str, list[Path]] = {}
    for directory, subdirs, files in os.walk(logdir):
        subdirs.sort()
        events = sorted(f for f in files if "tfevents" in f)
        if events:
            run = os.path.relpath(directory, logdir).replace(os.sep, "/")
            runs[run] = [Path(directory) / f for f in events]
    return runs


def select_runs(logdir: str | os.PathLike, run: str | None = None) -> dict[str, list[Path]]:
    """``event_runs`` of ``logdir``, or of its one ``run``; ``FileNotFoundError`` for a
    missing logdir, ``ValueError`` naming the runs for an unknown one."""
    root = Path(logdir)
    if not root.is_dir():
        raise FileNotFoundError(f"no such log directory: {str(root)!r}")
    runs = event_runs(root)
    if run is not None:
        if run not in runs:
            raise ValueError(f"no run {run!r} under {str(root)!r}; runs: {sorted(runs)}")
        runs = {run: runs[run]}
    return runs


def read_file(path: str, table: TagTable) -> Iterator[Chunk]:
    """A whole event file, taken as complete, a chunk at a time (a file that cannot be
    read gives one chunk that says so)."""
    try:
        size = os.stat(path).st_size
    except OSError as error:
        yield _empty(0, [f"{path}: skipped the file, it cannot be read ({error})"])
        return
    offset = 0
    while offset < size:
        chunk = read_chunk(path, offset, table, final=True)
        yield chunk
        if chunk.end <= offset:
            return
        offset = chunk.end


def _rest_of_first_record(file, data: bytes) -> bytes:
    """The bytes that complete a first record longer than the piece read, if its header is
    whole and valid (else none: it is damage, found by the framing)."""
    if masked_crc32c(data[:8]) != _crc_at(data, 8):
        return b""
    need = _HEADER + _LENGTH.unpack_from(data, 0)[0] + _FOOTER
    return file.read(need - len(data)) if need > len(data) else b""


def _empty(end: int, problems: list[str]) -> Chunk:
    return _Values(np.zeros(0, dtype=np.uint8), end).chunk(end, problems)


def _damage_text(path: str, base: int, damage: _Damage, before, after) -> str:
    where = [f"after step {before}" if before is not None else "before the first record"]
    if after is not None:
        where.append(f"before step {after}")
    return (
        f"{path}: {damage.reason}: skipped bytes {base + damage.start}-{base + damage.end} "
        f"({' and '.join(where)}); every other record is read"
    )


class _FastEvents:
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

    def take(self, values: _Values) -> int | None:
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


class _Values:
    """The numerics values of a chunk as they are met, turned into arrays at the end: taken
    from the scan (byte ranges of ``buffer``) or from protobuf (bytes of their own)."""

    def __init__(self, buffer: np.ndarray, file_offset: int) -> None:
        self.buffer = buffer
        self.file_offset = file_offset  # where ``buffer`` starts in the file
        self.parts: list[tuple[np.ndarray, ...]] = []  # (tags, steps, walls, starts, sizes)
        self.extra: list[bytes] = []  # contents of values parsed with protobuf
        self.extra_size = 0
        self.nonfinite: list[tuple[int, list[NonfiniteEntry]]] = []
        self.scalars: list[tuple[str, int, float, float]] = []

    def add_fast(self, tags, starts, sizes, step: int, wall_time: float) -> None:
        n = len(tags)
        self.parts.append((tags, np.full(n, step, np.int64), np.full(n, wall_time), starts, sizes))

    def _add_parsed(self, index: int, step: int, wall_time: float, content: bytes | None):
        start = len(self.buffer) + self.extra_size
        size = -1 if content is None else len(content)
        if content is not None:
            self.extra.append(content)
            self.extra_size += len(content)
        one = np.array
        self.parts.append(
            (one([index]), one([step], np.int64), one([wall_time]), one([start]), one([size]))
        )

    def add_event(self, event, table: TagTable, path: str, problems: list[str]) -> None:
        for value in event.summary.value:
            index = table.index(value.tag)
            if index is None and value.HasField("metadata"):
                plugin = value.metadata.plugin_data
                if plugin.plugin_name != PLUGIN_NAME:
                    if plugin.plugin_name == _SCALARS_PLUGIN:
                        table.scalar_tags.add(value.tag)
                    self.add_scalar(value, table, event)
                    continue
                index = table.add(value.tag, plugin.content)
            if index is None and not value.tag.startswith(_TAG_PREFIX):
                self.add_scalar(value, table, event)
                continue
            if index is None:
                if value.tag.startswith(_TAG_PREFIX) and table.refuse_once(value.tag):
                    problems.append(
                        f"{path}: skipped the records of tag {value.tag!r} from step "
                        f"{event.step}: its metadata (in the tag's first record) was not read"
                    )
                continue
            if table.infos[index] is None:
                if value.tag in table.kinds:
                    self.add_other(value, table.kinds[value.tag], event.step, path, problems)
                elif table.refuse_once(value.tag):
                    error = table.errors[value.tag]
                    problems.append(f"{path}: skipped the records of tag {value.tag!r}: {error}")
                continue
            content = _stored_bytes(value.tensor)
            self._add_parsed(index, event.step, event.wall_time, content)

    def add_scalar(self, value, table: TagTable, event) -> None:
        """A TensorBoard scalar (the loss, the learning rate) is kept; anything else not."""
        if value.WhichOneof("value") == "simple_value":
            number = value.simple_value
        elif value.tag in table.scalar_tags and not value.tensor.tensor_shape.dim:
            try:
                number = float(tensor_util.make_ndarray(value.tensor))
            except (TypeError, ValueError):
                return
        else:
            return
        self.scalars.append((value.tag, event.step, event.wall_time, number))

    def add_other(self, value, kind: str | None, step: int, path: str, problems: list[str]):
        """A value of a tag of this plugin that holds no numerics: the watch's is kept."""
        if kind != NONFINITE_KIND:
            return
        try:
            self.nonfinite.append((step, decode_nonfinite(value.tensor)))
        except ValueError as error:
            problems.append(
                f"{path}: skipped a malformed record of {value.tag!r} at step {step}: {error}"
            )

    def chunk(self, end: int, problems: list[str]) -> Chunk:
        if self.parts:
            tags, steps, walls, starts, sizes = (np.concatenate(c) for c in zip(*self.parts))
        else:
            tags, steps, walls, starts, sizes = (np.zeros(0, np.int64) for _ in range(5))
        source = self.buffer
        if self.extra:
            source = np.concatenate([source, np.frombuffer(b"".join(self.extra), np.uint8)])
        whole = sizes >= 0
        in_file = starts < len(self.buffer)
        return Chunk(
            end=end,
            tags=tags.astype(np.int32),
            steps=steps.astype(np.int64),
            wall_times=walls.astype(np.float64),
            sizes=sizes.astype(np.int64),
            contents=gather_ranges(source, starts[whole], sizes[whole]),
            file_offsets=np.where(in_file & whole, starts + self.file_offset, -1).astype(np.int64),
            problems=problems,
            nonfinite=self.nonfinite,
            scalars=self.scalars,
        )


def _stored_bytes(tensor) -> bytes | None:
    """The varint bytes of a stored vector: ``tensor_content`` of a version-2 tensor as is,
    any other 1-D integer vector (version 1) encoded; None for anything else."""
    dims = tensor.tensor_shape.dim
    if (
        tensor.dtype == types_pb2.DT_UINT8
        and len(dims) == 1
        and dims[0].size == len(tensor.tensor_content)
    ):
        return tensor.tensor_content
    if len(dims) != 1 or not 0 <= dims[0].size <= max(tensor.ByteSize(), 1):
        return None  # refused before make_ndarray could allocate a huge array
    try:
        return encode_varints(stored_vector(tensor_util.make_ndarray(tensor)))
    except (TypeError, ValueError):
        return None
