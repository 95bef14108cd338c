"""Bringing a run of the numerics store up to date with its event files.

Each file's new records and its new offset are committed in one transaction, so a killed
server leaves a store that is whole up to some offset. Records are stored by (tag, step,
seq) within each chunk, and a record's stored vector is kept as its place in the event file
(the event files are not copied; a vector re-encoded from an old version is kept inline).
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

import numpy as np
import pyarrow as pa

from tandv_tb.disk.chunk_values import Chunk
from tandv_tb.disk.event_reader import read_chunk
from tandv_tb.disk.record import COUNTS, STATISTICS
from tandv_tb.disk.record_columns import DecodedRows, decode_rows, ragged_index
from tandv_tb.disk.tag_table import TagTable

logger = logging.getLogger(__name__)

_HEAD_BYTES = 64  # a file whose first bytes changed was replaced


def update_run(cursor, run_dir: Path, run_id: int, table: TagTable) -> bool:
    """Store what is new in the run's event files (new bytes, new files; a deleted file's
    records are dropped, a replaced or shrunk file is read again); whether anything
    changed."""
    known = {
        name: (file_id, consumed, n_values, head)
        for file_id, name, consumed, n_values, head in cursor.execute(
            "SELECT file_id, name, consumed, n_values, head FROM files WHERE run_id = ?",
            [run_id],
        ).fetchall()
    }
    present = event_files(run_dir)
    changed = False
    for name in set(known) - set(present):  # deleted: its records are gone too
        _forget_file(cursor, known.pop(name)[0])
        changed = True
    for name, size in present.items():
        path = str(run_dir / name)
        head = _head(path)
        entry = known.get(name)
        if entry is not None and (size < entry[1] or head[: len(entry[3])] != entry[3]):
            logger.info("tandv_tb: %s was replaced or shrank: read again", path)
            _forget_file(cursor, entry[0])
            entry, changed = None, True
        if entry is None:
            entry = (_new_file(cursor, run_id, name, head), 0, 0, head)
        file_id, consumed, n_values, _ = entry
        while consumed < size:
            chunk = read_chunk(path, consumed, table, final=False)
            if chunk.end <= consumed:
                break
            _ingest(cursor, run_id, file_id, n_values, chunk, table, head)
            consumed, n_values, changed = chunk.end, n_values + len(chunk), True
    return changed


def run_id_of(cursor, run: str) -> int:
    """The run's id in the store, given now if it has none."""
    found = cursor.execute("SELECT run_id FROM runs WHERE run = ?", [run]).fetchone()
    if found:
        return found[0]
    run_id = cursor.execute("SELECT coalesce(max(run_id) + 1, 0) FROM runs").fetchone()[0]
    cursor.execute("INSERT INTO runs VALUES (?, ?)", [run_id, run])
    return run_id


def stored_tags(cursor, run_id: int) -> TagTable:
    """The run's tags as stored (metadata is in a tag's first record only)."""
    table = TagTable()
    for tag, content in cursor.execute(
        "SELECT tag, content FROM tags WHERE run_id = ? ORDER BY tag_id", [run_id]
    ).fetchall():
        table.add(tag, content)
    return table


def _new_file(cursor, run_id: int, name: str, head: bytes) -> int:
    file_id = cursor.execute("SELECT coalesce(max(file_id) + 1, 0) FROM files").fetchone()[0]
    cursor.execute("INSERT INTO files VALUES (?, ?, ?, 0, 0, ?)", [file_id, run_id, name, head])
    return file_id


def _forget_file(cursor, file_id: int) -> None:
    cursor.execute("BEGIN TRANSACTION")
    for table in ("records", "casts", "nonfinite", "scalars", "files"):
        cursor.execute(f"DELETE FROM {table} WHERE file_id = ?", [file_id])
    cursor.execute("COMMIT")


def _ingest(
    cursor,
    run_id: int,
    file_id: int,
    first_seq: int,
    chunk: Chunk,
    table: TagTable,
    head: bytes,
) -> None:
    """One chunk's records, its new tags and the file's new offset, in one transaction."""
    for problem in chunk.problems:
        logger.warning("tandv_tb: %s", problem)
    stored_tags = cursor.execute("SELECT count(*) FROM tags WHERE run_id = ?", [run_id]).fetchone()[
        0
    ]
    n_formats = np.array([len(i.formats) if i else 0 for i in table.infos], dtype=np.int64)
    rows = decode_rows(chunk.contents, chunk.sizes, n_formats[chunk.tags])
    malformed = np.bincount(chunk.tags, minlength=len(table)) - np.bincount(
        chunk.tags[rows.kept], minlength=len(table)
    )
    cursor.execute("BEGIN TRANSACTION")
    if len(table) > stored_tags:
        new = range(stored_tags, len(table))
        tags = pa.table(
            {
                "run_id": pa.array([run_id] * len(new), pa.int32()),
                "tag_id": pa.array(new, pa.int32()),
                "tag": pa.array(table.names[stored_tags:], pa.string()),
                "content": pa.array(table.contents[stored_tags:], pa.binary()),
                "malformed": pa.array([0] * len(new), pa.int64()),
            }
        )
        _insert(cursor, "tags", tags)
    for tag_id in np.flatnonzero(malformed).tolist():
        cursor.execute(
            "UPDATE tags SET malformed = malformed + ? WHERE run_id = ? AND tag_id = ?",
            [int(malformed[tag_id]), run_id, tag_id],
        )
    records, casts = _arrow_rows(run_id, file_id, first_seq, chunk, rows)
    _insert(cursor, "records", records)
    _insert(cursor, "casts", casts)
    _insert(cursor, "nonfinite", _nonfinite_rows(run_id, file_id, chunk))
    _insert(cursor, "scalars", _scalar_rows(run_id, file_id, first_seq, chunk))
    cursor.execute(
        "UPDATE files SET consumed = ?, n_values = ?, head = ? WHERE file_id = ?",
        [chunk.end, first_seq + len(chunk), head, file_id],
    )
    cursor.execute("COMMIT")


def _insert(cursor, table: str, rows: pa.Table | None) -> None:
    """Append an Arrow table's rows (None or empty: nothing) to one of the store's tables."""
    if rows is None or not rows.num_rows:
        return
    cursor.register("batch", rows)
    cursor.execute(f"INSERT INTO {table} SELECT * FROM batch")
    cursor.unregister("batch")


def _nonfinite_rows(run_id: int, file_id: int, chunk: Chunk) -> pa.Table | None:
    """The watch's entries of a chunk, one row each, ``position`` in execution order."""
    rows = [
        (step, position, e.tensor_type, e.name, e.nan, e.posinf, e.neginf)
        for step, entries in chunk.nonfinite
        for position, e in enumerate(entries)
    ]
    if not rows:
        return None
    step, position, tensor_type, name, nan, posinf, neginf = zip(*rows)
    return pa.table(
        {
            "run_id": pa.array([run_id] * len(rows), pa.int32()),
            "file_id": pa.array([file_id] * len(rows), pa.int32()),
            "step": pa.array(step, pa.int64()),
            "position": pa.array(position, pa.int32()),
            "tensor_type": pa.array(tensor_type, pa.string()),
            "name": pa.array(name, pa.string()),
            "nan": pa.array(nan, pa.int64()),
            "posinf": pa.array(posinf, pa.int64()),
            "neginf": pa.array(neginf, pa.int64()),
        }
    )


def _scalar_rows(run_id: int, file_id: int, first_seq: int, chunk: Chunk) -> pa.Table | None:
    if not chunk.scalars:
        return None
    tag, step, wall_time, value = zip(*chunk.scalars)
    n = len(tag)
    return pa.table(
        {
            "run_id": pa.array([run_id] * n, pa.int32()),
            "file_id": pa.array([file_id] * n, pa.int32()),
            "seq": pa.array(range(first_seq, first_seq + n), pa.int64()),
            "tag": pa.array(tag, pa.string()),
            "step": pa.array(step, pa.int64()),
            "wall_time": pa.array(wall_time, pa.float64()),
            "value": pa.array(value, pa.float64()),
        }
    )


def event_files(directory: Path) -> dict[str, int]:
    """``{name: size}`` of the event files directly in ``directory`` (a run's own)."""
    found = {}
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            if "tfevents" in entry.name:
                with contextlib.suppress(OSError):
                    if entry.is_file():
                        found[entry.name] = entry.stat().st_size
    return dict(sorted(found.items()))


def _head(path: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read(_HEAD_BYTES)
    except OSError:
        return b""


def _arrow_rows(
    run_id: int, file_id: int, first_seq: int, chunk: Chunk, rows: DecodedRows
) -> tuple[pa.Table, pa.Table | None]:
    """The ``records`` and ``casts`` rows of a chunk's readable records, ordered by (tag,
    step, seq): rows are read back by tag, and a store of chunks each so ordered comes
    back in a few sorted runs (``numerics_rows.latest_per_step``)."""
    order = np.lexsort((rows.kept, chunk.steps[rows.kept], chunk.tags[rows.kept]))
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
    blobs = [None] * n
    contents_at = chunk.offsets[kept]
    for row in inline.tolist():
        blobs[row] = chunk.contents[contents_at[row] : contents_at[row] + sizes[row]].tobytes()
    columns["vector"] = pa.array(blobs, pa.binary())
    records = pa.table(columns)
    n_pairs = (np.diff(rows.cast_starts) // 2)[order]
    if not n_pairs.any():
        return records, None
    row_of_pair = np.repeat(np.arange(n), n_pairs)
    first_pair = np.concatenate(([0], np.cumsum(n_pairs)[:-1]))
    pair_in_row = np.arange(len(row_of_pair)) - np.repeat(first_pair, n_pairs)
    casts = rows.casts[ragged_index(rows.cast_starts[:-1][order], 2 * n_pairs)]
    casts = pa.table(
        {
            "run_id": np.full(len(row_of_pair), run_id, dtype=np.int32),
            "file_id": np.full(len(row_of_pair), file_id, dtype=np.int32),
            "seq": seq[row_of_pair].astype(np.int64),
            "tag_id": tag_ids[row_of_pair].astype(np.int32),
            "step": steps[row_of_pair],
            "format_index": pair_in_row.astype(np.int8),
            "underflow": casts[0::2],
            "overflow": casts[1::2],
        }
    )
    return records, casts
