"""The store of every numerics record under a logdir, in DuckDB (for the plugin and findings).

TensorBoard keeps a sample of a plugin's steps in memory; a numerics tool must keep every
one (the step where a NaN appeared is the one a sample drops). This store reads the event
files itself (``tandv_tb.disk.event_reader``) into an embedded DuckDB database that lives in a
cache folder outside the logdir (``numerics_cache``: read-only logdirs work, a damaged or
old store is rebuilt), so a second start is fast and the server's memory is bounded by
DuckDB's buffer limit, not by the logdir's size.

- ``records``: one row per numerics record with its step, counts and statistics as columns
  (what heatmaps and lines read, a column at a time) and where its stored vector (varint
  bytes, ``tandv_tb.disk.summary``; for histograms and estimates) lies in its event file;
  ``casts``: the exact under/overflow per recorded format; ``tags``: each tag's metadata
  (from its first record); ``files``: how far each event file was read; ``nonfinite`` and
  ``scalars``: the watch's records and TensorBoard's scalars (the loss).
- A run is brought up to date (``numerics_ingest``) when it is asked for, at most once per
  ``REFRESH_SECS``: new bytes of growing files, new files, and a file that was replaced or
  shrank is read again from its start.
- This module reads: runs, tags, columns of records, vectors, casts, the watch, scalars
  (as numpy columns, ``numerics_rows``).

DuckDB was chosen by measurement over Parquet files (``bench/RESULTS.md``): it appends,
filters by run and tag and reads single columns without hand-written file management.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from tandv_tb.disk.event_reader import event_runs
from tandv_tb.disk.metadata import TagInfo
from tandv_tb.disk.nonfinite import NonfiniteEntry, NonfiniteStep
from tandv_tb.disk.record import COUNTS, STATISTICS
from tandv_tb.disk.record_columns import gather_ranges
from tandv_tb.disk.tag_table import TagTable
from tandv_tb.numerics_cache import close_store, open_store, store_path
from tandv_tb.numerics_ingest import event_files, run_id_of, stored_tags, update_run
from tandv_tb.numerics_rows import (
    HeldLayout,
    Rows,
    Table,
    fetch,
    latest_per_step,
    num_rows,
    rows_at,
)

logger = logging.getLogger(__name__)

#: Seconds between two looks at a run's files (TensorBoard itself reloads every 5 s).
REFRESH_SECS = 1.0
_SCALARS = ("dtype_code", *COUNTS, *STATISTICS)


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
        self._requested_path = store_path(logdir, cache_dir)
        self._connection, self.path = open_store(self._requested_path)
        self._write_lock = threading.Lock()
        self._waiting = 0  # requests waiting for the write lock: a background build yields
        self._waiting_lock = threading.Lock()
        self._closing = threading.Event()
        self._builder: threading.Thread | None = None
        self._building: str | None = None  # the run a background build is reading
        self._checked: dict[str, float] = {}
        self._tables: dict[str, TagTable] = {}
        self._versions: dict[str, int] = {}
        self._max_steps: dict[str, tuple[int, dict[int, int]]] = {}  # run -> (version, ...)
        self._run_ids: dict[str, int] = {}  # run -> its id in the store (never changes)

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        """A connection of this thread's own (one DuckDB connection is not thread-safe)."""
        return self._connection.cursor()

    def close(self) -> None:
        """Close the store (after a background build has stopped at its next transaction);
        a temporary one is deleted."""
        self._closing.set()
        if self._builder is not None:
            self._builder.join()
        close_store(self._connection, self.path, self._requested_path)

    def build_in_background(self) -> None:
        """Read every run's event files now, in a daemon thread, as TensorBoard's own data
        server does at its start: a first start finds the store built (or building) when
        the tab first asks, instead of beginning then. A request for a run goes before it:
        the build yields the write lock after its current transaction."""
        self._builder = threading.Thread(
            target=self._build_every_run, name="tandv_tb store build", daemon=True
        )
        self._builder.start()

    def _build_every_run(self) -> None:
        try:
            runs = self.runs()
        except OSError as error:  # the logdir went away: runs are read when asked for
            logger.warning("tandv_tb: could not list the runs under %s: %s", self.logdir, error)
            return
        for run in runs:
            self._building = run
            while not self._closing.is_set():
                if self._waiting:
                    time.sleep(0.01)
                    continue
                with self._write_lock:
                    if run in self._checked or self._closing.is_set():
                        break  # a request read it meanwhile
                    if self._update_logged(run, pause=self._yield_to_requests):
                        self._checked[run] = time.monotonic()
                        break
        self._building = None

    def _yield_to_requests(self) -> bool:
        return self._waiting > 0 or self._closing.is_set()

    # -- keeping up with the files -----------------------------------------------------------
    def refresh(self, run: str) -> int:
        """Read what is new in the run's event files; the run's version (it changes when
        records were added or removed)."""
        now = time.monotonic()
        last = self._checked.get(run)
        if last is not None and now - last < self._refresh_secs:
            return self._versions.get(run, 0)
        with self._waiting_lock:
            self._waiting += 1
        try:
            with self._write_lock:
                if self._checked.get(run) == last:
                    self._update_logged(run)
                    self._checked[run] = time.monotonic()
        finally:
            with self._waiting_lock:
                self._waiting -= 1
        return self._versions.get(run, 0)

    def _update_logged(self, run: str, pause: Callable[[], bool] | None = None) -> bool:
        """``_update`` under the write lock, a failure logged (what is stored is served):
        whether the run was read to its end."""
        cursor = self._cursor()
        try:
            return self._update(cursor, run, pause)
        except (duckdb.Error, OSError) as error:
            logger.warning("tandv_tb: could not update run %r in the store: %s", run, error)
            self._tables.pop(run, None)  # reloaded from what was committed
            with contextlib.suppress(duckdb.Error):
                cursor.execute("ROLLBACK")
            return True

    def _run_dir(self, run: str) -> Path:
        return Path(self.logdir) if run == "." else Path(self.logdir, *run.split("/"))

    def _update(self, cursor, run: str, pause: Callable[[], bool] | None) -> bool:
        run_id = run_id_of(cursor, run)
        if run not in self._tables:
            self._tables[run] = stored_tags(cursor, run_id)
        changed, finished = update_run(cursor, self._run_dir(run), run_id, self._tables[run], pause)
        if changed or run not in self._versions:
            self._versions[run] = self._versions.get(run, 0) + 1
        return finished

    def _stored_run_id(self, run: str) -> int:
        """The run's id in the store (-1, matching nothing, for a run never read)."""
        if run not in self._run_ids:
            found = (
                self._cursor().execute("SELECT run_id FROM runs WHERE run = ?", [run]).fetchone()
            )
            if found is None:
                return -1
            self._run_ids[run] = found[0]
        return self._run_ids[run]

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
        where, params = self._where(run, tag_ids)
        if steps is not None:
            where += " AND step IN (SELECT unnest(?::BIGINT[]))"
            params.append(list(steps))
        select = ", ".join(["tag_id", "step", *wanted])
        if vectors:
            select += ", file_id, vector_offset, vector_size, vector"
        cursor = self._cursor()
        cursor.execute("BEGIN TRANSACTION")  # both reads see the same rows
        try:
            table = fetch(cursor, f"SELECT {select} FROM records WHERE {where}", params)
            order = latest_per_step(
                table,
                lambda: fetch(cursor, f"SELECT file_id, seq FROM records WHERE {where}", params),
            )
        finally:
            cursor.execute("COMMIT")
        found = rows_at(table, order, wanted)
        found.n_read = num_rows(table)
        found.order = order.astype(np.int32) if found.n_read < 1 << 31 else order
        if vectors:
            found.vectors = self._vectors(run, table, order)
        return found

    def columns(
        self, run: str, tag_ids: list[int], columns: tuple[str, ...], layout: HeldLayout
    ) -> dict[str, np.ndarray] | None:
        """Scalar ``columns`` of the tags' records alone, arranged by ``layout`` (the
        ``rows`` of the same tags read before, ``HeldLayout.of``); None where the tags'
        records are no longer as many (the run changed since: read ``rows`` again).

        DuckDB returns rows in stored order (``preserve_insertion_order``, its default), so
        the same query gives the same rows in the same order."""
        where, params = self._where(run, tag_ids)
        query = f"SELECT {', '.join(columns)} FROM records WHERE {where}"
        table = fetch(self._cursor(), query, params)
        if num_rows(table) != layout.n_read:
            return None
        return {name: layout.arrange(table[name]) for name in columns}

    def _where(self, run: str, tag_ids: list[int]) -> tuple[str, list]:
        # ``list_contains`` and a known run id: several times faster than ``IN (SELECT ...)``
        return "run_id = ? AND list_contains(?::INTEGER[], tag_id)", [
            self._stored_run_id(run),
            list(tag_ids),
        ]

    def _vectors(self, run: str, table: Table, order: np.ndarray) -> tuple[np.ndarray, ...]:
        """The stored vectors of the rows at ``order``, laid end to end, and their offsets:
        read from the event files where they lie, or inline."""
        file_ids, at = table["file_id"][order], table["vector_offset"][order]
        sizes = table["vector_size"][order]
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
            blobs = table["vector"].take(pa.array(order[inline]))
            for row, blob in zip(inline.tolist(), blobs.to_pylist()):
                out[offsets[row] : offsets[row + 1]] = np.frombuffer(blob or b"", np.uint8)
        return out, offsets

    def runs(self) -> list[str]:
        """The runs under the logdir (folders holding event files), as TensorBoard names
        them ("." for the logdir itself)."""
        return sorted(event_runs(Path(self.logdir)))

    def has_run(self, run: str) -> bool:
        """Whether ``run`` is a folder of the logdir that holds event files now."""
        parts = run.split("/")
        if "\0" in run or (run != "." and any(part in ("", ".", "..") for part in parts)):
            return False  # not a name TensorBoard gives a run
        return bool(event_files(self._run_dir(run)))

    def has_read(self, run: str) -> bool:
        """Whether the run was read before (in this process, or by an earlier start); not
        while a background build reads it for the first time."""
        if run in self._checked:
            return True
        if run == self._building:
            return False
        if run in self._versions:
            return True
        found = self._cursor().execute(
            "SELECT count(*) FROM files f JOIN runs r USING (run_id) "
            "WHERE r.run = ? AND f.consumed > 0",
            [run],
        )
        return found.fetchone()[0] > 0

    def has_numerics(self) -> bool:
        """Whether the store holds any tag at all (read by an earlier start or refresh)."""
        return self._cursor().execute("SELECT count(*) FROM tags").fetchone()[0] > 0

    def tag_listing(self, run: str) -> dict[str, tuple[bytes, int]]:
        """``{tag: (its metadata's plugin content, its last stored step)}`` of every tag of
        this plugin in the run (as of its last ``refresh``): what listing a tag needs."""
        table = self._tables.get(run)
        if table is None:
            return {}
        version = self._versions.get(run, 0)
        held = self._max_steps.get(run)
        if held is None or held[0] != version:
            last = self._cursor().execute(
                "SELECT tag_id, max(step) FROM records "
                "WHERE run_id = (SELECT run_id FROM runs WHERE run = ?) GROUP BY tag_id",
                [run],
            )
            held = (version, dict(last.fetchall()))
            self._max_steps[run] = held
        steps = held[1]
        return {
            name: (content, steps.get(tag_id, 0))
            for tag_id, (name, content) in enumerate(zip(table.names, table.contents))
        }

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
        table = self._numpy(
            "SELECT tag, step, file_id, seq, value FROM scalars "
            "WHERE run_id = (SELECT run_id FROM runs WHERE run = ?) "
            "ORDER BY tag, step, file_id, seq",
            [run],
        )
        tags = table["tag"].to_pylist()
        steps, values = table["step"], table["value"]
        found = {}
        for tag in dict.fromkeys(tags):
            first, last = tags.index(tag), len(tags) - tags[::-1].index(tag)
            tag_steps, tag_values = steps[first:last], values[first:last]
            keep = np.append(tag_steps[1:] != tag_steps[:-1], True)
            found[tag] = (tag_steps[keep], tag_values[keep])
        return found

    def _numpy(self, query: str, params: list) -> Table:
        return fetch(self._cursor(), query, params)

    def casts(self, run: str, tags: dict[int, int]) -> Rows:
        """Exact (underflow, overflow) of one format at every record of the tags, given as
        ``{tag_id: the format's index in that tag's formats}``."""
        cursor = self._cursor()
        read = self._casts_reader(cursor, run, tags)
        cursor.execute("BEGIN TRANSACTION")  # both reads see the same rows
        try:
            table = read("tag_id, step, format_index, underflow, overflow")
            order = latest_per_step(table, lambda: read("tag_id, format_index, file_id, seq"))
        finally:
            cursor.execute("COMMIT")
        return rows_at(table, order, ("underflow", "overflow"))

    def casts_in(
        self, run: str, tags: dict[int, int], layout: HeldLayout
    ) -> dict[str, np.ndarray] | None:
        """``casts`` of tags that all hold the format at one index, arranged by ``layout``
        (the tags' records): casts are stored in the order of their records, one row per
        record and format, so they come back in the records' stored order. Their tags and
        steps are checked against the layout; None where they differ (use ``casts``)."""
        if len(set(tags.values())) != 1:
            return None
        where, params = self._casts_where(run, tags)
        query = f"SELECT tag_id, step, underflow, overflow FROM casts WHERE {where}"
        table = fetch(self._cursor(), query, params)
        if not layout.matches(table["tag_id"], table["step"]):
            return None
        return {name: layout.arrange(table[name]) for name in ("underflow", "overflow")}

    def _casts_reader(self, cursor, run: str, tags: dict[int, int]) -> Callable[[str], Table]:
        """Reads columns of the casts of ``tags`` (``casts``) through ``cursor``."""
        indexes = sorted(set(tags.values()))
        where, params = self._casts_where(run, tags)
        wanted = np.full(max(tags, default=0) + 1, -1)
        wanted[list(tags)] = list(tags.values())

        def read(columns: str) -> Table:
            table = fetch(cursor, f"SELECT {columns} FROM casts WHERE {where}", params)
            if len(indexes) <= 1:
                return table
            keep = wanted[table["tag_id"]] == table["format_index"]
            return {name: values[keep] for name, values in table.items()}

        return read

    def _casts_where(self, run: str, tags: dict[int, int]) -> tuple[str, list]:
        """The casts of ``tags`` at their formats' indexes (with rows of other tags at
        those indexes where the indexes differ: ``casts`` drops them)."""
        indexes = sorted(set(tags.values()))
        where, params = self._where(run, list(tags))
        if len(indexes) > 1:  # the format is at another place in some tags' formats
            return f"{where} AND list_contains(?::INTEGER[], format_index)", [*params, indexes]
        return f"{where} AND format_index = ?", [*params, indexes[0] if indexes else -1]
