"""The one reader of numerics event files, for ``read_frame`` and the plugin's store.

An event file is a sequence of framed records (``framing``), each an ``Event`` proto
(``TagTable`` keeps what is known of the tags across them). ``read_chunk`` reads the
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
  watch's record (``tandv_tb.disk.nonfinite_record``) is collected in ``Chunk.nonfinite``, and
  TensorBoard scalars (the loss) in ``Chunk.scalars``;
- an event that is not an ``Event`` proto, the values of a tag whose metadata is
  unreadable, from a newer tandv_tb or lost (in a damaged first record), and a value whose
  tensor is not a stored vector are skipped.

Each skip is described in ``Chunk.problems``: one sentence naming the file, the reason and,
where the damage lets it be known, the tag and step; for damaged bytes, the byte range and
the steps of the readable records around it. A refused tag is described once per table.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
from google.protobuf.message import DecodeError
from tensorboard.compat.proto import event_pb2

from tandv_tb.disk import framing
from tandv_tb.disk.chunk_values import Chunk, ChunkValues
from tandv_tb.disk.framing import Damage
from tandv_tb.disk.locations import ByteSource, LocalBytes, location, public_url
from tandv_tb.disk.tag_table import TagTable

#: Bytes read from a file at a time: a big file is read in pieces of about this size
#: (decoding a piece takes about 8 times its size in memory).
CHUNK_BYTES = 16 << 20


class DataWarning(UserWarning):
    """Some stored numerics could not be read (damaged file, newer version, bad record)."""


def read_chunk(
    source: str | ByteSource,
    offset: int,
    table: TagTable,
    *,
    final: bool,
    max_bytes: int = CHUNK_BYTES,
) -> Chunk:
    """The numerics values of a file (a local path, or a ``locations.ByteSource``: a remote
    object read by range) from byte ``offset`` on (up to about ``max_bytes``, always at
    least one whole record). With ``final`` the file is taken as complete, so a cut-short
    last record is damage rather than unfinished."""
    from tandv_tb.disk.fast_events import FastEvents  # numba: loaded on the first read

    if isinstance(source, str):
        source = LocalBytes(source)
    path = source.name
    problems: list[str] = []
    try:
        data = source.read(offset, max_bytes)
        if len(data) >= max_bytes and framing.record_end(data, 0) is None:
            need = framing.first_record_size(data)
            if need > len(data):
                data += source.read(offset + len(data), need - len(data))
        at_end = len(data) < max_bytes or not source.read(offset + len(data), 1)
    except OSError as error:
        return _empty(offset, [f"{path}: skipped the file, it cannot be read ({error})"])
    frames = list(framing.frames(data, final and at_end))
    consumed = frames.pop()
    buffer = np.frombuffer(data, dtype=np.uint8)
    bodies = [item for item in frames if not isinstance(item, Damage)]
    fast = FastEvents(buffer, bodies, table)
    values = ChunkValues(buffer, offset)
    pending: list[Damage] = []  # reported once the next readable step is known
    step: int | None = None
    for item in frames:
        if isinstance(item, Damage):
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
        pending.append(Damage(0, consumed, "damaged: no readable record"))
    for damage in pending:
        problems.append(_damage_text(path, offset, damage, step, None))
    return values.chunk(offset + consumed, problems)


def select_runs(logdir: str | os.PathLike, run: str | None = None) -> dict[str, list[ByteSource]]:
    """The event files of every run under ``logdir`` (a path or URL), or of its one
    ``run``, by run name (as TensorBoard names it) and file name; ``FileNotFoundError`` for
    a missing logdir, ``ValueError`` naming the runs for an unknown one, ``StorageError``
    for storage that cannot be read."""
    where = location(logdir)
    if not where.exists():
        raise FileNotFoundError(f"no such log directory: {public_url(where.url)!r}")
    runs = where.runs()
    if run is not None:
        if run not in runs:
            raise ValueError(
                f"no run {run!r} under {public_url(where.url)!r}; runs: {sorted(runs)}"
            )
        runs = {run: runs[run]}
    return {name: [where.source(name, f) for f in files] for name, files in runs.items()}


def read_file(source: str | ByteSource, table: TagTable) -> Iterator[Chunk]:
    """A whole event file, taken as complete, a chunk at a time (a file that cannot be
    read gives one chunk that says so)."""
    offset = 0
    while True:
        chunk = read_chunk(source, offset, table, final=True)
        if chunk.end <= offset and not chunk.problems and not len(chunk):
            return
        yield chunk
        if chunk.end <= offset:
            return
        offset = chunk.end


def _empty(end: int, problems: list[str]) -> Chunk:
    return ChunkValues(np.zeros(0, dtype=np.uint8), end).chunk(end, problems)


def _damage_text(path: str, base: int, damage: Damage, before, after) -> str:
    where = [f"after step {before}" if before is not None else "before the first record"]
    if after is not None:
        where.append(f"before step {after}")
    return (
        f"{path}: {damage.reason}: skipped bytes {base + damage.start}-{base + damage.end} "
        f"({' and '.join(where)}); every other record is read"
    )
