"""The store of every numerics record under a logdir, in DuckDB (for the plugin and findings).

TensorBoard keeps a sample of a plugin's steps in memory; a numerics tool must keep every
one (the step where a NaN appeared is the one a sample drops). This store reads the event
files itself (``tandv_tb.disk.event_reader``) into an embedded DuckDB database that lives in a
cache folder outside the logdir (read-only logdirs work), so a second start is fast and the
server's memory is bounded by DuckDB's buffer limit, not by the logdir's size.

- ``records``: one row per numerics record with its step, counts and statistics as columns
  (what heatmaps and lines read, a column at a time) and where its stored vector (varint
  bytes, ``tandv_tb.disk.summary``; for histograms and estimates) lies in its event file: the
  event files are not copied (a vector re-encoded from an old version is kept inline);
  ``casts``: the exact under/overflow per recorded format; ``tags``: each tag's metadata
  (from its first record); ``files``: how far each event file was read; ``nonfinite`` and
  ``scalars``: the watch's records and TensorBoard's scalars (the loss).
- A run is brought up to date when it is asked for, at most once per ``REFRESH_SECS``:
  new bytes of growing files, new files, and a file that was replaced or shrank is read
  again from its start. Each file's new records and its new offset are committed in one
  transaction, so a killed server leaves a store that is whole up to some offset.
- A store that cannot be opened (damaged by a killed process, written by another
  ``SCHEMA_VERSION``) is rebuilt; a cache folder that cannot be written, or a store held by
  another ``tensorboard`` on the same logdir, gives way to a temporary one, with a warning.

DuckDB was chosen by measurement over Parquet files (``bench/RESULTS.md``): it appends,
filters by run and tag and reads single columns without hand-written file management.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import tempfile
import threading
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from tandv_tb.disk.chunk_values import Chunk
from tandv_tb.disk.event_reader import event_runs, read_chunk
from tandv_tb.disk.metadata import TagInfo
from tandv_tb.disk.nonfinite import NonfiniteEntry, NonfiniteStep
from tandv_tb.disk.record import COUNTS, STATISTICS
from tandv_tb.disk.record_columns import DecodedRows, decode_rows, gather_ranges, ragged_index
from tandv_tb.disk.tag_table import TagTable

logger = logging.getLogger(__name__)

#: Bump when the tables change: a store of another version is rebuilt, never misread.
SCHEMA_VERSION = 5
#: Seconds between two looks at a run's files (TensorBoard itself reloads every 5 s).
REFRESH_SECS = 1.0
#: DuckDB's buffer limit: what bounds the server's memory, whatever the logdir's size.
MEMORY_LIMIT = "256MB"
_HEAD_BYTES = 64  # a file whose first bytes changed was replaced
_SCALARS = ("dtype_code", *COUNTS, *STATISTICS)

_SCHEMA = f"""
CREATE TABLE meta (key VARCHAR, value VARCHAR);
CREATE TABLE runs (run_id INTEGER, run VARCHAR);
CREATE TABLE files (file_id INTEGER, run_id INTEGER, name VARCHAR, consumed BIGINT,
                    n_values BIGINT, head BLOB);
CREATE TABLE tags (run_id INTEGER, tag_id INTEGER, tag VARCHAR, content BLOB,
                   malformed BIGINT);
CREATE TABLE records (run_id INTEGER, file_id INTEGER, seq BIGINT, tag_id INTEGER,
                      step BIGINT, wall_time DOUBLE, dtype_code TINYINT,
                      {", ".join(f"{c} BIGINT" for c in COUNTS)},
                      {", ".join(f"{s} DOUBLE" for s in STATISTICS)},
                      vector_offset BIGINT, vector_size BIGINT, vector BLOB);
CREATE TABLE nonfinite (run_id INTEGER, file_id INTEGER, step BIGINT, position INTEGER,
                        tensor_type VARCHAR, name VARCHAR, nan BIGINT, posinf BIGINT,
                        neginf BIGINT);
CREATE TABLE scalars (run_id INTEGER, file_id INTEGER, seq BIGINT, tag VARCHAR, step BIGINT,
                      wall_time DOUBLE, value DOUBLE);
CREATE TABLE casts (run_id INTEGER, file_id INTEGER, seq BIGINT, tag_id INTEGER,
                    step BIGINT, format_index TINYINT, underflow BIGINT,
                    overflow BIGINT);
"""


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/tandv_tb`` (``~/.cache/tandv_tb``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tandv_tb"


def store_path(logdir: str, cache_dir: str | os.PathLike | None) -> Path:
    """The database file of a logdir: one per logdir (by its real path) and version."""
    real = os.path.realpath(logdir)
    key = hashlib.sha256(real.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    base = Path(cache_dir) if cache_dir else default_cache_dir()
    return base / f"{key}-v{SCHEMA_VERSION}" / "numerics.duckdb"


@dataclasses.dataclass
class Rows:
    """Records of several tags of a run, sorted by (tag, step), one per (tag, step) (of
    two records at one step the later written stays, as in TensorBoard)."""

    tag_ids: np.ndarray  # int32[N]
    steps: np.ndarray  # int64[N]
    columns: dict[str, np.ndarray]  # name -> [N]
    vectors: tuple[np.ndarray, np.ndarray] | None = None  # (bytes uint8, offsets int64[N+1])
    _bounds: dict[int, tuple[int, int]] | None = dataclasses.field(default=None, repr=False)

    def nbytes(self) -> int:
        arrays = [self.tag_ids, self.steps, *self.columns.values()]
        return sum(a.nbytes for a in arrays)

    def bounds(self, tag_id: int) -> tuple[int, int]:
        """The slice of one tag's rows (empty for a tag without rows)."""
        if self._bounds is None:
            ids = self.tag_ids
            starts = np.flatnonzero(np.concatenate((ids[:1] == ids[:1], ids[1:] != ids[:-1])))
            ends = np.append(starts[1:], len(ids))
            self._bounds = dict(zip(ids[starts].tolist(), zip(starts.tolist(), ends.tolist())))
        return self._bounds.get(tag_id, (0, 0))


class NumericsDB:
    """Every numerics record of the runs under ``logdir``, kept up to date from the files."""

    def __init__(
        self,
        logdir: str,
        cache_dir: str | os.PathLike | None = None,
        *,
        refresh_secs: float = REFRESH_SECS,
    ):
        self.logdir = logdir
        self._refresh_secs = refresh_secs
        self.path = self._open(store_path(logdir, cache_dir))
        self._write_lock = threading.Lock()
        self._checked: dict[str, float] = {}
        self._tables: dict[str, TagTable] = {}
        self._versions: dict[str, int] = {}

    # -- opening ---------------------------------------------------------------------------
    def _open(self, path: Path) -> Path:
        for attempt in (path, None):
            if attempt is None:
                attempt = Path(tempfile.mkdtemp(prefix="tandv_tb-")) / "numerics.duckdb"
            try:
                self._connection = self._connect(attempt)
                return attempt
            except (duckdb.Error, OSError) as error:
                if attempt == path:
                    logger.warning(
                        "tandv_tb: cannot use the numerics store %s (%s); using a temporary "
                        "one instead (it is rebuilt at each start)",
                        path,
                        error,
                    )
                else:
                    raise
        raise AssertionError("unreachable")

    def _connect(self, path: Path) -> duckdb.DuckDBPyConnection:
        """A connection to a store of this version at ``path``; a damaged store or one of
        another version is deleted and made anew."""
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            connection = self._configure(duckdb.connect(str(path)))
            if _schema_version(connection) == str(SCHEMA_VERSION):
                return connection
            connection.close()
            logger.warning("tandv_tb: the numerics store %s is of another version: rebuilt", path)
        except duckdb.IOException as error:
            if "lock" in str(error).lower():
                raise  # held by another process: not ours to delete
            logger.warning("tandv_tb: the numerics store %s is damaged (%s): rebuilt", path, error)
        except duckdb.Error as error:
            logger.warning("tandv_tb: the numerics store %s is damaged (%s): rebuilt", path, error)
        for stale in path.parent.glob(path.name + "*"):  # the database and its WAL
            stale.unlink()
        connection = self._configure(duckdb.connect(str(path)))
        _schema_version(connection)
        return connection

    @staticmethod
    def _configure(connection: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
        connection.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
        connection.execute("SET threads = 2")
        return connection

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        """A connection of this thread's own (one DuckDB connection is not thread-safe)."""
        return self._connection.cursor()

    def close(self) -> None:
        self._connection.close()

    # -- keeping up with the files -----------------------------------------------------------
    def refresh(self, run: str) -> int:
        """Read what is new in the run's event files; the run's version (it changes when
        records were added or removed)."""
        now = time.monotonic()
        last = self._checked.get(run)
        if last is not None and now - last < self._refresh_secs:
            return self._versions.get(run, 0)
        with self._write_lock:
            if self._checked.get(run) == last:
                cursor = self._cursor()
                try:
                    self._update(cursor, run)
                except (duckdb.Error, OSError) as error:  # serve what is stored
                    logger.warning("tandv_tb: could not update run %r in the store: %s", run, error)
                    self._tables.pop(run, None)  # reloaded from what was committed
                    with contextlib.suppress(duckdb.Error):
                        cursor.execute("ROLLBACK")
                self._checked[run] = time.monotonic()
        return self._versions.get(run, 0)

    def _run_dir(self, run: str) -> Path:
        return Path(self.logdir) if run == "." else Path(self.logdir, *run.split("/"))

    def _update(self, cursor, run: str) -> None:
        run_id = self._run_id(cursor, run)
        table = self._table(cursor, run, run_id)
        known = {
            name: (file_id, consumed, n_values, head)
            for file_id, name, consumed, n_values, head in cursor.execute(
                "SELECT file_id, name, consumed, n_values, head FROM files WHERE run_id = ?",
                [run_id],
            ).fetchall()
        }
        present = _event_files(self._run_dir(run))
        changed = False
        for name in set(known) - set(present):  # deleted: its records are gone too
            self._forget_file(cursor, run_id, known.pop(name)[0])
            changed = True
        for name, size in present.items():
            path = str(self._run_dir(run) / name)
            head = _head(path)
            entry = known.get(name)
            if entry is not None and (size < entry[1] or head[: len(entry[3])] != entry[3]):
                logger.info("tandv_tb: %s was replaced or shrank: read again", path)
                self._forget_file(cursor, run_id, entry[0])
                entry, changed = None, True
            if entry is None:
                entry = (self._new_file(cursor, run_id, name, head), 0, 0, head)
            file_id, consumed, n_values, _ = entry
            while consumed < size:
                chunk = read_chunk(path, consumed, table, final=False)
                if chunk.end <= consumed:
                    break
                self._ingest(cursor, run_id, file_id, n_values, chunk, table, head)
                consumed, n_values, changed = chunk.end, n_values + len(chunk), True
        if changed or run not in self._versions:
            self._versions[run] = self._versions.get(run, 0) + 1

    def _run_id(self, cursor, run: str) -> int:
        found = cursor.execute("SELECT run_id FROM runs WHERE run = ?", [run]).fetchone()
        if found:
            return found[0]
        run_id = cursor.execute("SELECT coalesce(max(run_id) + 1, 0) FROM runs").fetchone()[0]
        cursor.execute("INSERT INTO runs VALUES (?, ?)", [run_id, run])
        return run_id

    def _table(self, cursor, run: str, run_id: int) -> TagTable:
        """The run's tags as stored (metadata is in a tag's first record only)."""
        if run not in self._tables:
            table = TagTable()
            for tag, content in cursor.execute(
                "SELECT tag, content FROM tags WHERE run_id = ? ORDER BY tag_id", [run_id]
            ).fetchall():
                table.add(tag, content)
            self._tables[run] = table
        return self._tables[run]

    def _new_file(self, cursor, run_id: int, name: str, head: bytes) -> int:
        file_id = cursor.execute("SELECT coalesce(max(file_id) + 1, 0) FROM files").fetchone()[0]
        cursor.execute("INSERT INTO files VALUES (?, ?, ?, 0, 0, ?)", [file_id, run_id, name, head])
        return file_id

    def _forget_file(self, cursor, run_id: int, file_id: int) -> None:
        cursor.execute("BEGIN TRANSACTION")
        for table in ("records", "casts", "nonfinite", "scalars", "files"):
            cursor.execute(f"DELETE FROM {table} WHERE file_id = ?", [file_id])
        cursor.execute("COMMIT")

    def _ingest(
        self,
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
        stored_tags = cursor.execute(
            "SELECT count(*) FROM tags WHERE run_id = ?", [run_id]
        ).fetchone()[0]
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

    # -- reading -----------------------------------------------------------------------------
    def tags(self, run: str) -> dict[str, tuple[int, TagInfo | None, int]]:
        """``{tag: (tag_id, info or None when refused, malformed records)}`` of a run (as
        of its last ``refresh``)."""
        table = self._tables.get(run)
        if table is None:
            return {}
        return {
            tag: (tag_id, table.infos[tag_id], bad)
            for tag_id, tag, bad in self._cursor()
            .execute(
                "SELECT t.tag_id, t.tag, t.malformed FROM tags t JOIN runs r USING (run_id) "
                "WHERE r.run = ?",
                [run],
            )
            .fetchall()
        }

    def rows(
        self,
        run: str,
        tag_ids: list[int],
        columns: tuple[str, ...],
        *,
        vectors: bool = False,
        steps: tuple[int, ...] | None = None,
    ) -> Rows:
        """The given scalar ``columns`` (of ``_SCALARS`` and ``wall_time``) of every record
        of the tags (or only at ``steps``), and their stored vectors if asked."""
        wanted = [c for c in columns if c in (*_SCALARS, "wall_time")]
        select = ", ".join(["tag_id", "step", "file_id", "seq", *wanted])
        if vectors:
            select += ", vector_offset, vector_size, vector"
        where = "run_id = (SELECT run_id FROM runs WHERE run = ?) AND tag_id IN "
        where += "(SELECT unnest(?::INTEGER[]))"
        params: list = [run, list(tag_ids)]
        if steps is not None:
            where += " AND step IN (SELECT unnest(?::BIGINT[]))"
            params.append(list(steps))
        table = self._arrow(f"SELECT {select} FROM records WHERE {where}", params)
        order = _latest_per_step(table)
        found = _rows_at(table, order, wanted)
        if vectors:
            found.vectors = self._vectors(run, table, order)
        return found

    def _vectors(self, run: str, table: pa.Table, order: np.ndarray) -> tuple[np.ndarray, ...]:
        """The stored vectors of the rows at ``order``, laid end to end, and their offsets:
        read from the event files where they lie, or inline."""
        file_ids = table.column("file_id").to_numpy()[order]
        at = table.column("vector_offset").to_numpy()[order]
        sizes = table.column("vector_size").to_numpy()[order]
        offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        out = np.zeros(int(offsets[-1]), dtype=np.uint8)
        names = dict(
            self._cursor()
            .execute(
                "SELECT file_id, name FROM files WHERE run_id = "
                "(SELECT run_id FROM runs WHERE run = ?)",
                [run],
            )
            .fetchall()
        )
        for file_id in np.unique(file_ids[at >= 0]).tolist():
            rows = np.flatnonzero((file_ids == file_id) & (at >= 0))
            path = self._run_dir(run) / names.get(file_id, "")
            try:
                data = np.memmap(path, dtype=np.uint8, mode="r")
                gather_ranges(data, at[rows], sizes[rows], out=out, out_starts=offsets[rows])
            except (OSError, ValueError) as error:  # gone or shorter since: a refresh drops it
                logger.warning("tandv_tb: cannot read vectors from %s: %s", path, error)
        inline = np.flatnonzero(at < 0)
        if len(inline):
            blobs = table.column("vector").take(pa.array(order[inline]))
            for row, blob in zip(inline.tolist(), blobs.to_pylist()):
                out[offsets[row] : offsets[row + 1]] = np.frombuffer(blob or b"", np.uint8)
        return out, offsets

    def runs(self) -> list[str]:
        """The runs under the logdir (folders holding event files), as TensorBoard names
        them ("." for the logdir itself)."""
        return sorted(event_runs(Path(self.logdir)))

    def nonfinite(self, run: str) -> list[NonfiniteStep]:
        """The watch's records of a run, by step, entries in execution order."""
        found: dict[int, list[NonfiniteEntry]] = {}
        for step, tensor_type, name, nan, posinf, neginf in (
            self._cursor()
            .execute(
                "SELECT step, tensor_type, name, nan, posinf, neginf FROM nonfinite "
                "WHERE run_id = (SELECT run_id FROM runs WHERE run = ?) "
                "ORDER BY step, file_id, position",
                [run],
            )
            .fetchall()
        ):
            found.setdefault(step, []).append(
                NonfiniteEntry(tensor_type, name, nan, posinf, neginf)
            )
        return [NonfiniteStep(run, step, tuple(entries)) for step, entries in found.items()]

    def scalars(self, run: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """``{tag: (steps, values)}`` of the run's TensorBoard scalars, by step (of two
        values at one step the later written stays)."""
        table = self._arrow(
            "SELECT tag, step, file_id, seq, value FROM scalars "
            "WHERE run_id = (SELECT run_id FROM runs WHERE run = ?) "
            "ORDER BY tag, step, file_id, seq",
            [run],
        )
        tags = table.column("tag").to_pylist()
        steps, values = table.column("step").to_numpy(), table.column("value").to_numpy()
        found = {}
        for tag in dict.fromkeys(tags):
            first, last = tags.index(tag), len(tags) - tags[::-1].index(tag)
            tag_steps, tag_values = steps[first:last], values[first:last]
            keep = np.append(tag_steps[1:] != tag_steps[:-1], True)
            found[tag] = (tag_steps[keep], tag_values[keep])
        return found

    def _arrow(self, query: str, params: list) -> pa.Table:
        return self._cursor().sql(query, params=params).to_arrow_table()

    def casts(self, run: str, tags: dict[int, int]) -> Rows:
        """Exact (underflow, overflow) of one format at every record of the tags, given as
        ``{tag_id: the format's index in that tag's formats}``."""
        table = self._arrow(
            "SELECT tag_id, step, file_id, seq, format_index, underflow, overflow FROM casts "
            "WHERE run_id = (SELECT run_id FROM runs WHERE run = ?) "
            "AND tag_id IN (SELECT unnest(?::INTEGER[])) "
            "AND format_index IN (SELECT unnest(?::INTEGER[]))",
            [run, list(tags), sorted(set(tags.values()))],
        )
        wanted = np.full(max(tags, default=0) + 1, -1)
        wanted[list(tags)] = list(tags.values())
        keep = wanted[table.column("tag_id").to_numpy()] == table.column("format_index").to_numpy()
        table = table.filter(pa.array(keep))
        return _rows_at(table, _latest_per_step(table), ("underflow", "overflow"))


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


def _schema_version(connection: duckdb.DuckDBPyConnection) -> str | None:
    """The store's schema version; ``SCHEMA_VERSION`` for a new, empty database (whose
    tables are made here)."""
    tables = connection.execute("SELECT table_name FROM information_schema.tables").fetchall()
    if not tables:
        connection.execute(_SCHEMA)
        connection.execute("INSERT INTO meta VALUES ('schema', ?)", [str(SCHEMA_VERSION)])
        return str(SCHEMA_VERSION)
    found = connection.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    return found[0] if found else None


def _event_files(directory: Path) -> dict[str, int]:
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
    back in a few sorted runs (``_latest_per_step``)."""
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


def _rows_at(table: pa.Table, order: np.ndarray, columns) -> Rows:
    """The ``Rows`` of a query's result, taken at ``order`` (``_latest_per_step``)."""
    return Rows(
        tag_ids=table.column("tag_id").to_numpy()[order].astype(np.int32),
        steps=table.column("step").to_numpy()[order],
        columns={c: table.column(c).to_numpy()[order] for c in columns},
    )


def _latest_per_step(table: pa.Table) -> np.ndarray:
    """Row order by (tag, step), keeping of each (tag, step) the last written record.

    Rows come back in the order they were stored: chunks each ordered by (tag, step,
    seq), so a stable sort by tag alone (a radix sort) orders them fully unless a tag's
    steps are out of order or repeated; then a full sort on (tag, step, file, seq)."""
    tags = table.column("tag_id").to_numpy()
    steps = table.column("step").to_numpy()
    small = len(tags) and tags.min() >= 0 and tags.max() < 1 << 16
    order = np.argsort(tags.astype(np.uint16) if small else tags, kind="stable")  # radix
    t, st = tags[order], steps[order]
    if ((t[1:] != t[:-1]) | (st[1:] > st[:-1])).all():  # each tag's steps ascend, once each
        return order
    files, seq = table.column("file_id").to_numpy(), table.column("seq").to_numpy()
    order = np.lexsort((seq, files, steps, tags))
    t, st = tags[order], steps[order]
    last = np.ones(len(order), dtype=bool)
    last[:-1] = (t[1:] != t[:-1]) | (st[1:] != st[:-1])
    return order[last]
