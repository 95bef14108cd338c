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
  watch's record (``tandv_tb.event_files.nonfinite_record``) is collected in
  ``Chunk.nonfinite``, and TensorBoard scalars (the loss) in ``Chunk.scalars``;
- an event that is not an ``Event`` proto, the values of a tag whose metadata is
  unreadable, from a newer tandv_tb or lost (in a damaged first record), and a value whose
  tensor is not a stored vector are skipped.

Each skip is described in ``Chunk.problems``: one sentence naming the file, the reason and,
where the damage lets it be known, the tag and step; for damaged bytes, the byte range and
the steps of the readable records around it. A refused tag is described once per table.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterator

import numpy as np
from google.protobuf.message import DecodeError
from tensorboard.compat.proto import event_pb2

from tandv_tb.event_files import framing
from tandv_tb.event_files.chunk_values import Chunk, ChunkValues
from tandv_tb.event_files.framing import Damage
from tandv_tb.event_files.tag_table import TagTable
from tandv_tb.filesystems.locations import location, public_url
from tandv_tb.filesystems.ranges import ByteSource, LocalBytes

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
    """The numerics values of a file (a local path, or a ``storage.ranges.ByteSource``: a remote
    object read by range) from byte ``offset`` on (up to about ``max_bytes``, always at
    least one whole record). With ``final`` the file is taken as complete, so a cut-short
    last record is damage rather than unfinished."""
    from tandv_tb.event_files.fast_events import FastEvents  # numba: loaded on the first read

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
        # only a file taken as complete asks whether it ends here (a request, remotely)
        at_end = final and (len(data) < max_bytes or not source.read(offset + len(data), 1))
    except OSError as error:
        return _empty(offset, [f"{path}: skipped the file, it cannot be read ({error})"])
    buffer = np.frombuffer(data, dtype=np.uint8)
    starts, ends, damages, consumed = _records(buffer, data, at_end)
    fast = FastEvents(buffer, starts, ends, table)
    values = ChunkValues(buffer, offset)
    taken = fast.take_all(values)
    steps: list[int | None] = fast.steps.tolist()  # None: unreadable
    notes: list[tuple[float, str | Damage]] = []  # (where, problem), where: event index
    last_registration = max(fast.registered.values(), default=-1)
    for index in np.flatnonzero(~taken).tolist():
        start, end = int(starts[index]), int(ends[index])
        try:
            event = event_pb2.Event.FromString(data[start:end])
        except DecodeError:
            steps[index] = None
            notes.append((index, "not an event"))
            continue
        steps[index] = event.step
        later = frozenset()
        if index < last_registration:
            later = frozenset(table.names[t] for t, at in fast.registered.items() if at > index)
        values.event = index
        found: list[str] = []
        values.add_event(event, table, path, found, later)
        notes += [(index, text) for text in found]
    notes += [(position - 0.5, damage) for position, damage in damages]
    if consumed == 0 and len(data) >= max_bytes:  # a whole piece without a record start
        consumed = len(data) // 2
        notes.append((len(steps), Damage(0, consumed, "damaged: no readable record")))
    problems += _problem_texts(path, offset, notes, steps)
    return values.chunk(offset + consumed, problems)


def _records(buffer: np.ndarray, data: bytes, final: bool):
    """``(starts, ends, damages, consumed)``: the data ranges of the whole records of a
    piece, each ``Damage`` with the number of records before it, and where reading
    stopped. The records are walked in compiled code up to the first that is not whole
    and valid, then by ``framing.frames`` (which defines damage) from there."""
    from tandv_tb.event_files.fast_framing import whole_records

    starts, ends, stop = whole_records(buffer)
    if stop >= len(data):
        return starts, ends, [], stop
    more_starts, more_ends, damages = [], [], []
    found = list(framing.frames(data, final, stop))
    consumed = found.pop()
    for item in found:
        if isinstance(item, Damage):
            damages.append((len(starts) + len(more_starts), item))
        else:
            more_starts.append(item[0])
            more_ends.append(item[1])
    if more_starts:
        starts = np.concatenate([starts, np.array(more_starts, dtype=np.int64)])
        ends = np.concatenate([ends, np.array(more_ends, dtype=np.int64)])
    return starts, ends, damages, consumed


def _problem_texts(path: str, base: int, notes: list, steps: list[int | None]) -> list[str]:
    """The problems of a piece in file order: each damage named with the steps of the
    readable events around it, each event that is not an ``Event`` proto with the step
    before it."""
    readable = [i for i, step in enumerate(steps) if step is not None]
    texts = []
    for where, note in sorted(notes, key=lambda item: item[0]):
        at = bisect.bisect_left(readable, where)
        before = steps[readable[at - 1]] if at > 0 else None
        if isinstance(note, Damage):
            after = steps[readable[at]] if at < len(readable) else None
            texts.append(_damage_text(path, base, note, before, after))
        elif note == "not an event":
            texts.append(
                f"{path}: skipped an event that is not a valid Event proto (after step {before})"
            )
        else:
            texts.append(note)
    return texts


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
