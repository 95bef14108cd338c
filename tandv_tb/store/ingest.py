"""Bringing a run of the store up to date with its event files.

Each file's new records and its new offset are committed in one transaction, so a killed
server leaves a store that is whole up to some offset. Records are stored by (step, tag,
seq) within each chunk, and a record's stored vector is kept as its place in the event file
(the event files are not copied; a vector re-encoded from an old version is kept inline).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
from collections.abc import Callable, Iterator
from typing import Protocol

import numpy as np
import pyarrow as pa

from tandv_tb.event_files.chunk_values import Chunk
from tandv_tb.event_files.record import COUNTS, STATISTICS
from tandv_tb.event_files.record_columns import DecodedRows, decode_rows
from tandv_tb.event_files.tag_table import TagTable
from tandv_tb.filesystems.ranges import ragged_index
from tandv_tb.store.block_rows import block_rows
from tandv_tb.store.logdir import RunFiles
from tandv_tb.store.schema import FILE_ROWS

logger = logging.getLogger(__name__)

_HEAD_BYTES = 64  # a file whose first bytes changed was replaced
#: Rows to append: column name -> numpy array, in the table's column order.
Columns = dict[str, np.ndarray]
#: Records written in one transaction, at least (chunks of a file are gathered up to it):
#: DuckDB writes an append of a row group (122,880 rows) or more to the database file at
#: once, and a smaller one to its write-ahead log, checkpointed again and again (measured:
#: a run's commits took 2 s of 9 with one chunk of ~110,000 records a transaction).
BATCH_RECORDS = 1 << 17


def update_run(
    cursor,
    files: RunFiles,
    run_id: int,
    table: TagTable,
    pause: Callable[[], bool] | None = None,
    reading: Reading | None = None,
) -> tuple[bool, bool]:
    """Store what is new in the run's event files (new bytes, new files; a deleted file's
    records are dropped, a replaced or shrunk file is read again): whether anything
    changed, and whether the run is now read to its end. A file is known replaced by its
    first bytes, read each time for a local file; on remote storage (a request per object)
    only when its size changed, so an object replaced by one of the same size is missed
    (objects written by ``NumericsWriter`` are never replaced). ``pause`` is asked between
    transactions: when it says so, the update stops there (the store is whole up to that
    offset; the next update goes on from it). ``reading``: where the files are read and
    decoded (default ``READ_HERE``)."""
    reading = READ_HERE if reading is None else reading
    known = {
        name: (file_id, consumed, n_values, head)
        for file_id, name, consumed, n_values, head in cursor.execute(
            "SELECT file_id, name, consumed, n_values, head FROM files WHERE run_id = ?",
            [run_id],
        ).fetchall()
    }
    present = files.sizes()
    changed = False
    for name in set(known) - set(present):  # deleted: its records are gone too
        _forget_file(cursor, known.pop(name)[0])
        changed = True
    for name, size in present.items():
        entry = known.get(name)
        if entry is not None and size == entry[1] and not files.local:
            continue  # an object of the same size: nothing new (its head not asked for)
        head = files.head(name, _HEAD_BYTES)
        if entry is not None and (size < entry[1] or head[: len(entry[3])] != entry[3]):
            logger.info("tandv_tb: %s was replaced or shrank: read again", files.path(name))
            _forget_file(cursor, entry[0])
            entry, changed = None, True
        if entry is None:
            entry = (_new_file(cursor, run_id, name, head), 0, 0, head)
        file_id, consumed, n_values, _ = entry
        pending: list[Decoded] = []
        if consumed < size and pause is not None and pause():  # between transactions
            return changed, False
        pieces = reading.pieces(files, name, (consumed, size), table, (run_id, file_id, n_values))
        with contextlib.closing(pieces):
            for piece in pieces:
                for problem in piece.problems:
                    logger.warning("tandv_tb: %s", problem)
                pending.append(piece.decoded)
                consumed, n_values, changed = piece.end, n_values + piece.n_values, True
                if sum(len(part.rows["records"]["seq"]) for part in pending) >= BATCH_RECORDS:
                    _write(cursor, run_id, file_id, pending, table, (consumed, n_values, head))
                    pending = []
                    if consumed < size and pause is not None and pause():
                        return changed, False
        if pending:
            _write(cursor, run_id, file_id, pending, table, (consumed, n_values, head))
    return changed, True


class Reading(Protocol):
    """Where a file's pieces are read and decoded (``read_piece``): in the calling thread
    (``READ_HERE``) or in a process of its own (``reader_process.ReaderProcess``)."""

    def pieces(
        self,
        files: RunFiles,
        name: str,
        span: tuple[int, int],
        table: TagTable,
        ids: tuple[int, int, int],
    ) -> Iterator[Piece]:
        """The pieces of a file from ``span[0]`` (an offset) on while they end before
        ``span[1]`` (its size as listed), in file order, each decoded as ``read_piece`` with
        ``ids`` = (run id, file id, the file's values read before), ``table`` kept up to
        date with the tags met. A piece that reads nothing ends them."""


class _ReadHere:
    def pieces(self, files, name, span, table, ids) -> Iterator[Piece]:
        (offset, size), (run_id, file_id, first_seq) = span, ids
        while offset < size:
            piece = read_piece(files, name, offset, table, (run_id, file_id, first_seq))
            if piece is None:
                return
            yield piece
            offset, first_seq = piece.end, first_seq + piece.n_values


#: Reading in the calling thread.
READ_HERE: Reading = _ReadHere()


@dataclasses.dataclass
class Piece:
    """A piece of a file read and decoded: its rows, where reading stopped, the values
    read, and what was skipped (one sentence each)."""

    decoded: Decoded
    end: int
    n_values: int
    problems: list[str]


def read_piece(
    files: RunFiles,
    name: str,
    offset: int,
    table: TagTable,
    ids: tuple[int, int, int],
    max_bytes: int | None = None,
) -> Piece | None:
    """The piece of a file from ``offset`` (``RunFiles.chunk``, about ``max_bytes``)
    decoded into the rows of the store's tables, ``ids`` = (run id, file id, the file's
    values read before it); None where it reads nothing (the file ends there, or its next
    record is unfinished)."""
    chunk = files.chunk(name, offset, table, max_bytes)
    if chunk.end <= offset:
        return None
    run_id, file_id, first_seq = ids
    return Piece(
        _decode(run_id, file_id, first_seq, chunk, table), chunk.end, len(chunk), chunk.problems
    )


def stored_tags(cursor, run_id: int) -> TagTable:
    """The run's tags as stored (metadata is in a tag's first record only), and its scalar
    tags (a tensor scalar's later values carry no metadata that says it is one)."""
    table = TagTable()
    for tag, content in cursor.execute(
        "SELECT tag, content FROM tags WHERE run_id = ? ORDER BY tag_id", [run_id]
    ).fetchall():
        table.add(tag, content)
    scalars = cursor.execute("SELECT DISTINCT tag FROM scalars WHERE run_id = ?", [run_id])
    table.scalar_tags.update(tag for (tag,) in scalars.fetchall())
    return table


def _new_file(cursor, run_id: int, name: str, head: bytes) -> int:
    file_id = cursor.execute("SELECT coalesce(max(file_id) + 1, 0) FROM files").fetchone()[0]
    cursor.execute("INSERT INTO files VALUES (?, ?, ?, 0, 0, ?)", [file_id, run_id, name, head])
    return file_id


def _forget_file(cursor, file_id: int) -> None:
    cursor.execute("BEGIN TRANSACTION")
    for table in (*FILE_ROWS, "files"):
        cursor.execute(f"DELETE FROM {table} WHERE file_id = ?", [file_id])
    cursor.execute("COMMIT")


@dataclasses.dataclass
class Decoded:
    """One chunk's rows for each table of ``FILE_ROWS`` (None: none), and its malformed
    records by tag id."""

    rows: dict[str, Columns | None]
    malformed: np.ndarray


def _decode(run_id: int, file_id: int, first_seq: int, chunk: Chunk, table: TagTable) -> Decoded:
    n_formats = np.array([len(i.formats) if i else 0 for i in table.infos], dtype=np.int64)
    n_blocks = np.array([len(i.block_formats) if i else 0 for i in table.infos], dtype=np.int64)
    rows = decode_rows(
        chunk.contents,
        chunk.sizes,
        n_formats[chunk.tags],
        with_bins=False,
        n_blocks=n_blocks[chunk.tags],
    )
    malformed = np.bincount(chunk.tags, minlength=len(table)) - np.bincount(
        chunk.tags[rows.kept], minlength=len(table)
    )
    records, casts, order = _record_rows(run_id, file_id, first_seq, chunk, rows)
    blocks, block_scales = block_rows(records, rows.blocks, order)
    found = {
        "records": records,
        "casts": casts,
        "blocks": blocks,
        "block_scales": block_scales,
        "nonfinite": _nonfinite_rows(run_id, file_id, chunk),
        "graphs": _graph_rows(run_id, file_id, chunk),
        "scalars": _scalar_rows(run_id, file_id, first_seq, chunk),
    }
    assert set(found) == set(FILE_ROWS), "a table of rows from a file is not filled here"
    return Decoded(found, malformed)


def _write(
    cursor,
    run_id: int,
    file_id: int,
    parts: list[Decoded],
    table: TagTable,
    file_state: tuple[int, int, bytes],
) -> None:
    """Chunks' rows of one file, the run's new tags and the file's new offset (consumed,
    values read, head), in one transaction: a killed server leaves the store whole up to
    some offset of each file."""
    stored = cursor.execute("SELECT count(*) FROM tags WHERE run_id = ?", [run_id]).fetchone()[0]
    malformed = np.zeros(len(table), dtype=np.int64)
    for part in parts:
        malformed[: len(part.malformed)] += part.malformed
    cursor.execute("BEGIN TRANSACTION")
    if len(table) > stored:
        new = np.arange(stored, len(table), dtype=np.int32)
        tags = {
            "run_id": np.full(len(new), run_id, dtype=np.int32),
            "tag_id": new,
            "tag": _objects(table.names[stored:]),
            "content": _objects(table.contents[stored:]),
            "malformed": np.zeros(len(new), dtype=np.int64),
        }
        _insert(cursor, "tags", [tags])
    for tag_id in np.flatnonzero(malformed).tolist():
        cursor.execute(
            "UPDATE tags SET malformed = malformed + ? WHERE run_id = ? AND tag_id = ?",
            [int(malformed[tag_id]), run_id, tag_id],
        )
    for name in FILE_ROWS:
        _insert(cursor, name, [part.rows[name] for part in parts])
    cursor.execute(
        "UPDATE files SET consumed = ?, n_values = ?, head = ? WHERE file_id = ?",
        [*file_state, file_id],
    )
    cursor.execute("COMMIT")


def _concatenate(parts: list[Columns]) -> Columns:
    if len(parts) == 1:
        return parts[0]
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}


def _insert(cursor, table: str, parts: list[Columns | None]) -> None:
    """Append rows given as parts of numpy columns by name (None or empty: nothing) to one
    of the store's tables.

    Numeric columns go in as Arrow arrays over the numpy buffers, a batch per part (no
    copy, NaN stays NaN; 0.2-0.45 s less CPU than scanning the numpy arrays for a run of
    2.5 M records), a column of NULLs only is left to its default. A column of other
    objects (tags, names, inline vectors) is scanned by DuckDB from numpy (the parts
    joined): building Arrow arrays from Python objects imports pandas (a second of a first
    start), and numpy's scan reads a float NaN as NULL, pandas' rule, so NULL is put back
    as NaN there."""
    parts = [rows for rows in parts if rows and len(next(iter(rows.values())))]
    if not parts:
        return
    rows = parts[0]
    objects = {name for name, values in rows.items() if values.dtype == object}
    if any(rows[name].dtype.kind not in "iufO" for name in rows) or any(
        np.not_equal(part[name], None).any() for part in parts for name in objects
    ):
        rows = _concatenate(parts)
        names = list(rows)
        select = ", ".join(
            f"coalesce({name}, 'NaN'::DOUBLE)" if values.dtype.kind == "f" else name
            for name, values in rows.items()
        )
        batch = rows
    else:
        names = [name for name in rows if name not in objects]
        select = "*"
        batch = pa.Table.from_batches(
            pa.RecordBatch.from_arrays([_arrow(part[name]) for name in names], names=names)
            for part in parts
        )
    cursor.register("batch", batch)
    cursor.execute(f"INSERT INTO {table} ({', '.join(names)}) SELECT {select} FROM batch")
    cursor.unregister("batch")


def _arrow(values: np.ndarray) -> pa.Array:
    """A numeric numpy column as an Arrow array over the same memory (``pa.array`` would
    import pandas)."""
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(
        pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)]
    )


def _nonfinite_rows(run_id: int, file_id: int, chunk: Chunk) -> Columns | None:
    """The watch's entries of a chunk, one row each, ``position`` in execution order."""
    rows = [
        (step, position, e.tensor_type, e.name, e.nan, e.posinf, e.neginf, stopped)
        for step, entries, stopped in chunk.nonfinite
        for position, e in enumerate(entries)
    ]
    if not rows:
        return None
    step, position, tensor_type, name, nan, posinf, neginf, stopped = zip(*rows)
    return {
        "run_id": np.full(len(rows), run_id, dtype=np.int32),
        "file_id": np.full(len(rows), file_id, dtype=np.int32),
        "step": np.array(step, dtype=np.int64),
        "position": np.array(position, dtype=np.int32),
        "tensor_type": _objects(tensor_type),
        "name": _objects(name),
        "nan": np.array(nan, dtype=np.int64),
        "posinf": np.array(posinf, dtype=np.int64),
        "neginf": np.array(neginf, dtype=np.int64),
        "stopped": np.array(stopped, dtype=bool),
    }


def _graph_rows(run_id: int, file_id: int, chunk: Chunk) -> Columns | None:
    """The graph records of a chunk, each its graph as JSON or its problem."""
    if not chunk.graphs:
        return None
    n = len(chunk.graphs)
    return {
        "run_id": np.full(n, run_id, dtype=np.int32),
        "file_id": np.full(n, file_id, dtype=np.int32),
        "step": np.array([g.step for g in chunk.graphs], dtype=np.int64),
        "piece_end": np.full(n, chunk.end, dtype=np.int64),
        "position": np.arange(n, dtype=np.int32),
        "graph": _objects(
            [None if g.graph is None else json.dumps(g.graph.to_json()) for g in chunk.graphs]
        ),
        "problem": _objects([g.problem for g in chunk.graphs]),
    }


def _scalar_rows(run_id: int, file_id: int, first_seq: int, chunk: Chunk) -> Columns | None:
    if not chunk.scalars:
        return None
    tag, step, wall_time, value = zip(*chunk.scalars)
    n = len(tag)
    return {
        "run_id": np.full(n, run_id, dtype=np.int32),
        "file_id": np.full(n, file_id, dtype=np.int32),
        "seq": np.arange(first_seq, first_seq + n, dtype=np.int64),
        "tag": _objects(tag),
        "step": np.array(step, dtype=np.int64),
        "wall_time": np.array(wall_time, dtype=np.float64),
        "value": np.array(value, dtype=np.float64),
    }


def _objects(values) -> np.ndarray:
    """Strings or bytes (None for NULL) as a numpy object column."""
    column = np.empty(len(values), dtype=object)
    column[:] = list(values)
    return column


def _record_rows(
    run_id: int, file_id: int, first_seq: int, chunk: Chunk, rows: DecodedRows
) -> tuple[Columns, Columns | None, np.ndarray]:
    """The ``records`` and ``casts`` rows of a chunk's readable records, ordered by (step,
    tag, seq), and that order (the decoded row of each record): a run written step by step
    (as trackers write) is then stored step by step, each step with its tags in order, and
    a column of many tags read back is a [steps, tags] matrix whose transpose is their
    (tag, step) order, with nothing to sort or gather (``layout.HeldLayout``)."""
    order = np.lexsort((rows.kept, chunk.tags[rows.kept], chunk.steps[rows.kept]))
    kept = rows.kept[order]
    n = len(kept)
    seq = first_seq + kept
    tag_ids = chunk.tags[kept]
    steps = chunk.steps[kept]
    columns = {
        "run_id": np.full(n, run_id, dtype=np.int32),
        "file_id": np.full(n, file_id, dtype=np.int32),
        "seq": seq.astype(np.int64),
        "tag_id": tag_ids.astype(np.int32),
        "step": steps,
        "wall_time": chunk.wall_times[kept],
        "dtype_code": rows.dtype_codes[order].astype(np.int8),
    }
    columns.update({c: rows.counts[order, i] for i, c in enumerate(COUNTS)})
    columns.update({s: rows.statistics[order, i] for i, s in enumerate(STATISTICS)})
    sizes = chunk.sizes[kept]
    at = chunk.file_offsets[kept]
    columns["vector_offset"] = at
    columns["vector_size"] = sizes
    inline = np.flatnonzero(at < 0)  # re-encoded vectors: kept here, the others in the file
    blobs = np.full(n, None, dtype=object)
    contents_at = chunk.offsets[kept]
    for row in inline.tolist():
        blobs[row] = chunk.contents[contents_at[row] : contents_at[row] + sizes[row]].tobytes()
    columns["vector"] = blobs
    records = columns
    n_pairs = (np.diff(rows.cast_starts) // 2)[order]
    if not n_pairs.any():
        return records, None, order
    row_of_pair = np.repeat(np.arange(n), n_pairs)
    first_pair = np.concatenate(([0], np.cumsum(n_pairs)[:-1]))
    pair_in_row = np.arange(len(row_of_pair)) - np.repeat(first_pair, n_pairs)
    casts = rows.casts[ragged_index(rows.cast_starts[:-1][order], 2 * n_pairs)]
    casts = {
        "run_id": np.full(len(row_of_pair), run_id, dtype=np.int32),
        "file_id": np.full(len(row_of_pair), file_id, dtype=np.int32),
        "seq": seq[row_of_pair].astype(np.int64),
        "tag_id": tag_ids[row_of_pair].astype(np.int32),
        "step": steps[row_of_pair],
        "format_index": pair_in_row.astype(np.int8),
        "underflow": np.ascontiguousarray(casts[0::2]),
        "overflow": np.ascontiguousarray(casts[1::2]),
    }
    return records, casts, order
