"""The numerics store: every record of the runs under a logdir, for the plugin and the
findings (``NumericsStore``).

TensorBoard keeps a sample of a plugin's steps in memory; a numerics tool must keep every
one (the step where a NaN appeared is the one a sample drops). The store reads the event
files itself into an embedded DuckDB database outside the logdir (``database``), so a
second start is fast and the server's memory is bounded by DuckDB's buffer limit, not by
the logdir's size. DuckDB was chosen by measurement over Parquet files
(``bench/RESULTS.md``): it appends, filters by run and tag and reads single columns
without hand-written file management.

Reading what is new in a run's files is ``refresh``, called once per request (by the
plugin's request handler, by ``tandv_tb.findings``); every other method reads the store as
of the run's last refresh, and its ``version`` keys what is cached of it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tandv_tb.event_files.nonfinite_record import NonfiniteStep
from tandv_tb.event_files.record import NumericsRecord
from tandv_tb.event_files.record_columns import decode_tensor
from tandv_tb.filesystems.locations import StorageError
from tandv_tb.formats import BLOCKS, CASTS, BlockFormat, ElementFormat, Format
from tandv_tb.store import assemble
from tandv_tb.store.database import Database
from tandv_tb.store.held import HeldColumns
from tandv_tb.store.logdir import Logdir, first_tags_of
from tandv_tb.store.reader import Reader
from tandv_tb.store.reader_process import ReaderProcess
from tandv_tb.store.rows import Rows
from tandv_tb.store.run_ids import RunIds
from tandv_tb.store.series import (
    BlockHistory,
    LayerGrid,
    LayerSeries,
    Needs,
    ScalarSeries,
)
from tandv_tb.store.updates import Updates

logger = logging.getLogger(__name__)

#: Seconds between two looks at a run's files (TensorBoard itself reloads every 5 s).
REFRESH_SECS = 1.0
#: Runs whose first tags are read between two looks at whether the store closes.
FIRST_TAGS_AT_ONCE = 64


class NumericsStore:
    """Every numerics record of the runs under ``logdir`` (a path, a URL, or a ``Logdir``
    of a ``--logdir_spec``), kept up to date from the files (``cache_dir``: the local folder
    of the database, ``database.database_path``). With ``reader_process`` the files are
    read and decoded in a process of its own (``reader_process``: for a server whose
    Python code is busy with other work), else in the calling threads."""

    def __init__(
        self,
        logdir: str | os.PathLike | Logdir,
        cache_dir: str | os.PathLike | None = None,
        *,
        refresh_secs: float = REFRESH_SECS,
        reader_process: bool = False,
    ):
        self._logdir = logdir if isinstance(logdir, Logdir) else Logdir.of(logdir)
        self.logdir = self._logdir.root
        self._database = Database(self._logdir.key, cache_dir)
        run_ids = RunIds(self._database)
        self._reader_process = ReaderProcess() if reader_process else None
        self._updates = Updates(
            self._database, run_ids, self._logdir, refresh_secs, self._reader_process
        )
        self._reader = Reader(self._database, run_ids, self._logdir)
        self._held = HeldColumns(self._reader)
        self._first_tags: dict[str, dict[str, tuple[bytes, int]]] = {}

    @property
    def path(self) -> Path | None:
        """The database's file (None: in memory; ``database.Database``)."""
        return self._database.path

    @property
    def notice(self) -> str | None:
        """Why the store is not in ``cache_dir`` but in a temporary place, for the tab
        (said in the log too); None where it is there."""
        return self._database.notice

    def close(self) -> None:
        """Close the store (after a background build has stopped at its next transaction);
        a temporary one is deleted."""
        self._updates.close()
        if self._reader_process is not None:
            self._reader_process.close()
        self._database.close()

    def build_in_background(self) -> None:
        """Start reading every run (``updates.Updates.build_in_background``), after the
        ``first_tags`` of those never read (so that the tab's first listing finds them)."""

        def first_tags(runs: list[str]) -> None:
            read = self.runs_read()
            unread = [run for run in runs if run not in read]
            for at in range(0, len(unread), FIRST_TAGS_AT_ONCE):
                if self._updates.closing():
                    return
                some = unread[at : at + FIRST_TAGS_AT_ONCE]
                for run, found in zip(some, self._first_tags_of(some)):
                    if isinstance(found, OSError):  # listed when asked for, or said then
                        text = "tandv_tb: could not list the tags of run %r: %s"
                        logger.warning(text, run, found)
                    else:
                        self._keep_first_tags(run, found)

        if self._reader_process is not None:
            self._reader_process.start()
        self._updates.build_in_background(first_tags)

    # -- runs and keeping up with their files -------------------------------------------------
    def refresh(self, run: str) -> int:
        """Read what is new in the run's event files (at most once per ``refresh_secs``);
        the run's version after it. A name that is no run of the logdir reads nothing."""
        if not self._updates.was_read(run) and not self._logdir.is_run(run):
            return self.version(run)
        return self._updates.refresh(run)

    def version(self, run: str) -> int:
        """The run's version as of its last refresh: it changes when records were added or
        removed."""
        return self._updates.versions.get(run, 0)

    def runs(self) -> list[str]:
        """The runs under the logdir (folders holding event files), as TensorBoard names
        them ("." for the logdir itself); ``StorageError`` where it cannot be listed."""
        return self._logdir.runs()

    def has_run(self, run: str) -> bool:
        """Whether ``run`` is a folder of the logdir that holds event files now."""
        return self._logdir.is_run(run)

    def has_read(self, run: str) -> bool:
        """Whether the run was read before (in this process, or by an earlier start); not
        while a background build reads it for the first time."""
        if self._updates.was_read(run):
            return True
        if run == self._updates.building:
            return False
        return run in self._updates.versions or self._reader.has_consumed(run)

    def runs_read(self) -> set[str]:
        """The runs ``has_read`` says were read, asked once for all (one query)."""
        known = set(self._updates.versions) | self._reader.consumed_runs()
        known.discard(self._updates.building)
        return known | self._updates.read_to_end()

    @property
    def storage_failure(self) -> StorageError | None:
        """Why the background build could not list the logdir's storage, if it could not."""
        return self._updates.listing_failure

    def has_numerics(self) -> bool:
        """Whether the store holds any tag at all (read by an earlier start or refresh)."""
        return self._reader.has_tags()

    # -- tags ----------------------------------------------------------------------------------
    def tags(self, run: str) -> assemble.StoredTags:
        """Every tag of this plugin in the run, with its id and metadata."""
        table = self._updates.tables.get(run)
        return {} if table is None else self._reader.tags(run, table)

    def tag_listing(self, run: str) -> dict[str, tuple[bytes, int]]:
        """``{tag: (its metadata's plugin content, its last stored step)}`` of every tag of
        this plugin in the run: what listing a tag needs."""
        table = self._updates.tables.get(run)
        if table is None:
            return {}
        steps = self._reader.last_steps(run, self.version(run))
        return {
            name: (content, steps.get(tag_id, 0))
            for tag_id, (name, content) in enumerate(zip(table.names, table.contents))
        }

    def first_tags(self, run: str) -> dict[str, tuple[bytes, int]]:
        """What listing a run's tags needs (as ``tag_listing``), from the first piece of its
        first event file (``logdir.RunFiles.first_tags``): a sweep's runs are listed at
        once, before the store has read them. Kept per run; none for a run without files."""
        found = self._first_tags.get(run)
        if found is None:
            (found,) = self._first_tags_of([run])
            if isinstance(found, OSError):
                raise found
            self._keep_first_tags(run, found)
        return found

    def _first_tags_of(self, runs: list[str]) -> list[dict[str, tuple[bytes, int]] | OSError]:
        files = [self._logdir.files(run) for run in runs]
        if self._reader_process is not None:
            return self._reader_process.first_tags(files)
        return first_tags_of(files)

    def _keep_first_tags(self, run: str, found: dict[str, tuple[bytes, int]]) -> None:
        if len(self._first_tags) > 10_000:  # runs come and go over a server's life
            self._first_tags.clear()
        self._first_tags[run] = found

    # -- records, the watch and scalars, as the findings read them -----------------------------
    def rows(
        self,
        run: str,
        tag_ids: list[int],
        columns: tuple[str, ...],
        *,
        vectors: bool = False,
        steps: tuple[int, ...] | None = None,
    ) -> Rows:
        """The given scalar ``columns`` of every record of the tags (or only at ``steps``),
        one per (tag, step), and their stored vectors if asked (``reader.Reader.rows``)."""
        return self._reader.rows(run, tag_ids, columns, vectors=vectors, steps=steps)

    def per_format(self, run: str, format: Format, tags: dict[int, int]) -> Rows:
        """The columns of ``format`` (``Format.columns``: an element format's exact
        (underflow, overflow); a block format's ``record.BlockCounts`` counts,
        ``total_blocks`` and the error's ``exponent``, ``signal`` and ``error``) at every
        record of the tags, given as ``{tag_id: its position in that tag's section}``
        (``TagInfo.position``)."""
        return self._reader.per_format(run, format.section, tags, format.columns)

    def casts(self, run: str, tags: dict[int, int]) -> Rows:
        """``per_format`` of one element format, given by its position in each tag's
        ``formats``."""
        return self._reader.per_format(run, CASTS, tags, ElementFormat.columns)

    def blocks(self, run: str, tags: dict[int, int]) -> Rows:
        """``per_format`` of one block-scaled format, given by its position in each tag's
        ``block_formats``."""
        return self._reader.per_format(run, BLOCKS, tags, BlockFormat.columns)

    def block_scales(
        self, run: str, tag_id: int, format_index: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(steps, scale exponents, blocks)``: the blocks of one block-scaled format
        (``format_index`` in the tag's ``block_formats``) per non-empty scale exponent at
        every record of a tag, by step, then exponent."""
        return self._reader.block_scales(run, tag_id, format_index)

    def nonfinite(self, run: str) -> list[NonfiniteStep]:
        """The watch's records of a run, by step, entries in execution order."""
        return self._reader.nonfinite(run)

    def graph(self, run: str) -> tuple[tuple[int, str] | None, list[tuple[int, str]]]:
        """The run's graph: its last readable record (step, graph as JSON) or None, and
        the records that could not be read (step, why)."""
        return self._reader.graph(run)

    def scalar_series(self, run: str, tags: list[str] | None = None) -> dict[str, ScalarSeries]:
        """The run's TensorBoard scalars (only ``tags``, where given), every stored step."""
        return self._reader.scalars(run, tags)

    def scalars(self, run: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """``{tag: (steps, values)}`` of the run's TensorBoard scalars, by step (of two
        values at one step the later written stays)."""
        return {tag: (s.steps, s.values) for tag, s in self.scalar_series(run).items()}

    # -- series, grids and records, as the routes read them ------------------------------------
    def series(self, run: str, tags: Sequence[str], needs: Needs) -> list[LayerSeries]:
        """Every held step of each tag, with the columns ``needs`` names (a tag the store
        does not hold: no step)."""
        stored = self.tags(run)
        known = [assemble.usable(stored, tag) for tag in tags]
        present = [found[0] for found in known if found is not None]
        version = self.version(run)
        layout, columns = self._held.read(run, version, present, needs.columns)
        per_format = estimated = None
        if needs.format is not None:
            recorded, estimated = assemble.recorded(known, needs.format)
            if recorded:
                per_format = self._held.per_format(
                    run,
                    version,
                    present,
                    needs.format.section,
                    recorded,
                    needs.format.columns,
                    layout,
                )
        vectors = (
            self._reader.rows(run, estimated, (), vectors=True)
            if estimated and needs.bins
            else None
        )
        return [
            assemble.layer(tag, found, layout, columns, per_format, vectors, needs.format)
            for tag, found in zip(tags, known)
        ]

    def grid(self, run: str, tags: Sequence[str], needs: Needs) -> LayerGrid | None:
        """Every tag's columns at once, as [tags, steps] matrices, where they all hold the
        same steps and ``needs`` a format only if each of them recorded it at one place
        (nothing is estimated): a heatmap computes on one matrix instead of layer by
        layer. None otherwise (use ``series``)."""
        stored = self.tags(run)
        known = [assemble.usable(stored, tag) for tag in tags]
        if not known or any(found is None for found in known):
            return None
        wanted = needs.format
        section = CASTS if wanted is None else wanted.section
        kinds = {info.in_section(section) for _, info, _ in known}
        common = next(iter(kinds)) if len(kinds) == 1 else ()
        if wanted is not None and wanted not in common:
            return None
        present = [tag_id for tag_id, _, _ in known]
        version = self.version(run)
        layout, columns = self._held.read(run, version, present, needs.columns)
        if layout.grid is None:
            return None
        if wanted is not None:
            index = dict.fromkeys(present, common.index(wanted))
            found = self._held.per_format(
                run, version, present, section, index, wanted.columns, layout
            )
            if not isinstance(found, dict):
                return None
            columns = {**columns, **{wanted.column_key(k): v for k, v in found.items()}}
        rows = [layout.grid.row_of[tag_id] for tag_id in present]
        if rows != list(range(len(rows))):  # tags not in the order of their ids
            columns = {name: values[rows] for name, values in columns.items()}
        if wanted is None:
            common = known[0][1].recorded if len(kinds) == 1 else ()
        return LayerGrid(common, layout.grid.steps, columns)

    def block_history(self, run: str, tag: str, format: BlockFormat) -> BlockHistory | None:
        """Every held step of what the block format ``format`` does to ``tag``; None where
        the tag did not record it (or the store does not hold the tag)."""
        found = assemble.usable(self.tags(run), tag)
        index = None if found is None else found[1].position(format)
        if index is None:
            return None
        tag_id = found[0]
        rows = self.per_format(run, format, {tag_id: index})
        steps, exponents, counts = self.block_scales(run, tag_id, index)
        lo = int(exponents.min()) if len(exponents) else 0
        width = int(exponents.max()) - lo + 1 if len(exponents) else 0
        scales = np.zeros((len(rows.steps), width), dtype=np.int64)
        at = np.searchsorted(rows.steps, steps)
        scales[at, exponents - lo] = counts
        return BlockHistory(rows.steps, rows.columns, lo, scales)

    def record(self, run: str, tag: str, step: int | None) -> tuple[int, NumericsRecord] | None:
        """The held step of ``tag`` nearest to ``step`` (the last when None; the earlier
        one on a tie) and its record; None when the tag has no readable step."""
        found = assemble.usable(self.tags(run), tag)
        if found is None:
            return None
        tag_id, info, _ = found
        held = self._reader.rows(run, [tag_id], ()).steps
        if not len(held):
            return None
        row = len(held) - 1 if step is None else _nearest(held, step)
        read = self._reader.rows(run, [tag_id], (), vectors=True, steps=(int(held[row]),))
        data, offsets = read.vectors
        vector = np.frombuffer(data[offsets[-2] : offsets[-1]], dtype=np.uint8)
        return int(held[row]), decode_tensor(vector, info)


def _nearest(steps: np.ndarray, step: int) -> int:
    """The row of the held step nearest to ``step`` (the earlier one on a tie)."""
    right = int(np.searchsorted(steps, step, side="left"))
    if right == 0:
        return 0
    if right == len(steps):
        return right - 1
    left = right - 1
    return left if step - steps[left] <= steps[right] - step else right
