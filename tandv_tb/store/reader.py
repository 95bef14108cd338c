"""The store's reads (every SELECT but ingest's): tags, columns of records, stored
vectors, casts, the watch's records and TensorBoard's scalars, as numpy arrays.

DuckDB returns rows in stored order (``preserve_insertion_order``, its default), so the
same query gives the same rows in the same order: a column read alone is arranged by the
layout of an earlier read of the same tags (``layout.HeldLayout``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from tandv_tb.event_files.metadata import TagInfo
from tandv_tb.event_files.nonfinite_record import NonfiniteEntry, NonfiniteStep
from tandv_tb.event_files.tag_table import TagTable
from tandv_tb.store.database import Database
from tandv_tb.store.layout import HeldLayout
from tandv_tb.store.logdir import Logdir
from tandv_tb.store.results import Table, fetch, latest_per_step, num_rows
from tandv_tb.store.rows import Rows, rows_at
from tandv_tb.store.run_ids import RunIds
from tandv_tb.store.schema import RECORD_COLUMNS
from tandv_tb.store.series import ScalarSeries

logger = logging.getLogger(__name__)


class Reader:
    """Reads a logdir's store (``run_ids`` names its runs; ``logdir`` holds the files
    where stored vectors lie)."""

    def __init__(self, database: Database, run_ids: RunIds, logdir: Logdir):
        self._database = database
        self._run_ids = run_ids
        self._logdir = logdir
        self._max_steps: dict[str, tuple[int, dict[int, int]]] = {}  # run -> (version, ...)

    def _cursor(self):
        return self._database.cursor()

    # -- runs and tags -------------------------------------------------------------------------
    def has_consumed(self, run: str) -> bool:
        """Whether some bytes of the run's files were read into the store (by any start)."""
        found = self._cursor().execute(
            "SELECT count(*) FROM files WHERE run_id = ? AND consumed > 0",
            [self._run_ids.find(run)],
        )
        return found.fetchone()[0] > 0

    def consumed_runs(self) -> set[str]:
        """The runs some bytes of whose files were read into the store (by any start)."""
        found = self._cursor().execute(
            "SELECT DISTINCT run FROM runs JOIN files USING (run_id) WHERE consumed > 0"
        )
        return {run for (run,) in found.fetchall()}

    def has_tags(self) -> bool:
        """Whether the store holds any tag at all."""
        return self._cursor().execute("SELECT count(*) FROM tags").fetchone()[0] > 0

    def tags(self, run: str, table: TagTable) -> dict[str, tuple[int, TagInfo | None, int]]:
        """``{tag: (tag_id, info or None when refused, malformed records)}`` of a run, with
        ``table`` its tags as read."""
        return {
            tag: (tag_id, table.infos[tag_id], bad)
            for tag_id, tag, bad in self._cursor()
            .execute(
                "SELECT tag_id, tag, malformed FROM tags WHERE run_id = ?",
                [self._run_ids.find(run)],
            )
            .fetchall()
        }

    def last_steps(self, run: str, version: int) -> dict[int, int]:
        """``{tag_id: its last stored step}`` of a run at ``version`` (kept until the next)."""
        held = self._max_steps.get(run)
        if held is None or held[0] != version:
            last = self._cursor().execute(
                "SELECT tag_id, max(step) FROM records WHERE run_id = ? GROUP BY tag_id",
                [self._run_ids.find(run)],
            )
            held = (version, dict(last.fetchall()))
            self._max_steps[run] = held
        return held[1]

    # -- records -------------------------------------------------------------------------------
    def rows(
        self,
        run: str,
        tag_ids: list[int],
        columns: tuple[str, ...],
        *,
        vectors: bool = False,
        steps: tuple[int, ...] | None = None,
    ) -> Rows:
        """The given scalar ``columns`` (of ``RECORD_COLUMNS``) of every record of the tags
        (or only at ``steps``), and their stored vectors if asked."""
        wanted = [c for c in columns if c in RECORD_COLUMNS]
        table, order = self._ordered(run, tag_ids, wanted, steps, vectors)
        found = rows_at(table, order, wanted)
        if vectors:
            found.vectors = self._vectors(run, table, order)
        return found

    def layout(
        self, run: str, tag_ids: list[int], columns: tuple[str, ...]
    ) -> tuple[HeldLayout, dict[str, np.ndarray]]:
        """The layout of the tags' records, and their ``columns`` arranged by it."""
        table, order = self._ordered(run, tag_ids, list(columns), None, False)
        found = rows_at(table, order, columns)
        layout = HeldLayout.of(found.index, order, num_rows(table))
        return layout, {name: layout.shape(values) for name, values in found.columns.items()}

    def _ordered(
        self,
        run: str,
        tag_ids: list[int],
        columns: list[str],
        steps: tuple[int, ...] | None,
        vectors: bool,
    ) -> tuple[Table, np.ndarray]:
        """The records' columns as stored, and the order that puts them by (tag, step),
        the last written of a (tag, step) kept (``latest_per_step``)."""
        where, params = self._where(run, tag_ids)
        if steps is not None:
            where += " AND step IN (SELECT unnest(?::BIGINT[]))"
            params.append(list(steps))
        select = ", ".join(["tag_id", "step", *columns])
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
        return table, order

    def columns(
        self, run: str, tag_ids: list[int], columns: tuple[str, ...], layout: HeldLayout
    ) -> dict[str, np.ndarray] | None:
        """Scalar ``columns`` of the tags' records alone, arranged by ``layout`` (``layout``
        of the same tags before); None where the tags' records are no longer as many (the
        run changed since: read the layout again)."""
        where, params = self._where(run, tag_ids)
        query = f"SELECT {', '.join(columns)} FROM records WHERE {where}"
        table = fetch(self._cursor(), query, params)
        if num_rows(table) != layout.n_read:
            return None
        return {name: layout.arrange(table[name]) for name in columns}

    def _where(self, run: str, tag_ids: list[int]) -> tuple[str, list]:
        # ``list_contains`` and a known run id: several times faster than ``IN (SELECT ...)``
        return "run_id = ? AND list_contains(?::INTEGER[], tag_id)", [
            self._run_ids.find(run),
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
            .execute("SELECT file_id, name FROM files WHERE run_id = ?", [self._run_ids.find(run)])
            .fetchall()
        )
        files = self._logdir.files(run)
        for file_id in np.unique(file_ids[at >= 0]).tolist():
            rows = np.flatnonzero((file_ids == file_id) & (at >= 0))
            name = names.get(file_id, "")
            try:
                files.read_ranges(name, at[rows], sizes[rows], out, offsets[rows])
            except (OSError, ValueError) as error:  # gone or shorter since: a refresh drops it
                logger.warning("tandv_tb: cannot read vectors from %s: %s", files.path(name), error)
        inline = np.flatnonzero(at < 0)
        if len(inline):
            blobs = table["vector"].take(pa.array(order[inline]))
            for row, blob in zip(inline.tolist(), blobs.to_pylist()):
                out[offsets[row] : offsets[row + 1]] = np.frombuffer(blob or b"", np.uint8)
        return out, offsets

    # -- per record and format: casts and block formats --------------------------------------
    def per_format(
        self, run: str, table: str, tags: dict[int, int], columns: tuple[str, ...]
    ) -> Rows:
        """``columns`` of ``table`` (``casts`` or ``blocks``: one row per record and format)
        at every record of the tags, for one format given as ``{tag_id: its index in that
        tag's formats}`` (``block_formats`` for ``blocks``)."""
        cursor = self._cursor()
        read = self._per_format_reader(cursor, run, table, tags)
        cursor.execute("BEGIN TRANSACTION")  # both reads see the same rows
        try:
            found = read(", ".join(("tag_id", "step", "format_index", *columns)))
            order = latest_per_step(found, lambda: read("tag_id, format_index, file_id, seq"))
        finally:
            cursor.execute("COMMIT")
        return rows_at(found, order, columns)

    def per_format_in(
        self,
        run: str,
        table: str,
        tags: dict[int, int],
        columns: tuple[str, ...],
        layout: HeldLayout,
    ) -> dict[str, np.ndarray] | None:
        """``per_format`` of tags that all hold the format at one index, arranged by
        ``layout`` (the tags' records): such rows are stored in the order of their records,
        one per record and format, so they come back in the records' stored order. Their
        tags and steps are checked against the layout; None where they differ (use
        ``per_format``)."""
        if len(set(tags.values())) != 1:
            return None
        where, params = self._per_format_where(run, tags)
        query = f"SELECT tag_id, step, {', '.join(columns)} FROM {table} WHERE {where}"
        found = fetch(self._cursor(), query, params)
        if not layout.matches(found["tag_id"], found["step"]):
            return None
        return {name: layout.arrange(found[name]) for name in columns}

    def _per_format_reader(
        self, cursor, run: str, table: str, tags: dict[int, int]
    ) -> Callable[[str], Table]:
        """Reads columns of ``table`` for the tags' formats (``per_format``) through
        ``cursor``."""
        indexes = sorted(set(tags.values()))
        where, params = self._per_format_where(run, tags)
        wanted = np.full(max(tags, default=0) + 1, -1)
        wanted[list(tags)] = list(tags.values())

        def read(columns: str) -> Table:
            found = fetch(cursor, f"SELECT {columns} FROM {table} WHERE {where}", params)
            if len(indexes) <= 1:
                return found
            keep = wanted[found["tag_id"]] == found["format_index"]
            return {name: values[keep] for name, values in found.items()}

        return read

    def _per_format_where(self, run: str, tags: dict[int, int]) -> tuple[str, list]:
        """The rows of ``tags`` at their formats' indexes (with rows of other tags at
        those indexes where the indexes differ: ``per_format`` drops them)."""
        indexes = sorted(set(tags.values()))
        where, params = self._where(run, list(tags))
        if len(indexes) > 1:  # the format is at another place in some tags' formats
            return f"{where} AND list_contains(?::INTEGER[], format_index)", [*params, indexes]
        return f"{where} AND format_index = ?", [*params, indexes[0] if indexes else -1]

    def block_scales(
        self, run: str, tag_id: int, format_index: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(steps, scale exponents, blocks)`` of the non-empty scale exponents of one
        block format (``format_index`` in the tag's ``block_formats``) at every record of
        one tag, by step, then exponent (of two records at one step the later written)."""
        params = [self._run_ids.find(run), tag_id, format_index]
        where = "run_id = ? AND tag_id = ? AND format_index = ?"
        cursor = self._cursor()
        cursor.execute("BEGIN TRANSACTION")  # both reads see the same rows
        try:
            written = fetch(
                cursor,
                f"SELECT step, file_id, seq FROM blocks WHERE {where} ORDER BY step, file_id, seq",
                params,
            )
            found = fetch(
                cursor,
                "SELECT step, file_id, seq, scale_exponent, n_blocks FROM block_scales "
                f"WHERE {where} ORDER BY step, file_id, seq, scale_exponent",
                params,
            )
        finally:
            cursor.execute("COMMIT")
        steps = written["step"]
        last = np.append(steps[1:] != steps[:-1], True)  # each step's last written record
        latest = _record_keys(written)[last]
        keep = np.isin(_record_keys(found), latest)
        return found["step"][keep], found["scale_exponent"][keep], found["n_blocks"][keep]

    # -- the watch and TensorBoard's scalars ---------------------------------------------------
    def nonfinite(self, run: str) -> list[NonfiniteStep]:
        """The watch's records of a run, by step, entries in execution order."""
        found: dict[int, list[NonfiniteEntry]] = {}
        stopped: set[int] = set()
        for step, tensor_type, name, nan, posinf, neginf, stop in (
            self._cursor()
            .execute(
                "SELECT step, tensor_type, name, nan, posinf, neginf, stopped FROM nonfinite "
                "WHERE run_id = ? ORDER BY step, file_id, position",
                [self._run_ids.find(run)],
            )
            .fetchall()
        ):
            found.setdefault(step, []).append(
                NonfiniteEntry(tensor_type, name, nan, posinf, neginf)
            )
            if stop:
                stopped.add(step)
        return [
            NonfiniteStep(run, step, tuple(entries), step in stopped)
            for step, entries in found.items()
        ]

    def graph(self, run: str) -> tuple[tuple[int, str] | None, list[tuple[int, str]]]:
        """The run's last readable graph record (step, graph as JSON), or None; and every
        record that could not be read (step, why), in the order written."""
        order = "ORDER BY g.step {0}, f.name {0}, g.piece_end {0}, g.position {0}"
        cursor = self._cursor()
        run_id = self._run_ids.find(run)
        latest = cursor.execute(
            "SELECT g.step, g.graph FROM graphs g JOIN files f USING (file_id) "
            f"WHERE g.run_id = ? AND g.graph IS NOT NULL {order.format('DESC')} LIMIT 1",
            [run_id],
        ).fetchone()
        problems = cursor.execute(
            "SELECT g.step, g.problem FROM graphs g JOIN files f USING (file_id) "
            f"WHERE g.run_id = ? AND g.graph IS NULL {order.format('')}",
            [run_id],
        ).fetchall()
        return latest, problems

    def scalars(self, run: str, tags: list[str] | None = None) -> dict[str, ScalarSeries]:
        """``{tag: ScalarSeries}`` of the run's TensorBoard scalars (only ``tags``, where
        given), by tag; of two values at one step the later written stays."""
        where, params = "run_id = ?", [self._run_ids.find(run)]
        if tags is not None:
            where += " AND list_contains(?::VARCHAR[], tag)"
            params.append(list(tags))
        table = fetch(
            self._cursor(),
            f"SELECT tag, step, wall_time, value FROM scalars WHERE {where} "
            "ORDER BY tag, step, file_id, seq",
            params,
        )
        names = table["tag"].to_pylist()
        found = {}
        for tag in dict.fromkeys(names):
            first, last = names.index(tag), len(names) - names[::-1].index(tag)
            steps = table["step"][first:last]
            keep = np.append(steps[1:] != steps[:-1], True)
            found[tag] = ScalarSeries(
                steps[keep], table["wall_time"][first:last][keep], table["value"][first:last][keep]
            )
        return found


def _record_keys(table: Table) -> np.ndarray:
    """One integer per record: its file and its place in the file."""
    return (table["file_id"].astype(np.int64) << 40) | table["seq"]
