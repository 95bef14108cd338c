"""The life of a tracker, both trackers' (``tandv_tb.torch.track``, ``tandv_tb.jax.track``):
its step counter, its cadence (which steps are tracked: ``is_tracked_step``), its writer,
the one way a tracked step ends (``_finish_tracked``), what ``on_nonfinite`` does,
``flush``, ``close`` and the ``with`` block."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Protocol

from tandv_tb.event_files.graph_record import ModelGraph
from tandv_tb.event_files.nonfinite_record import NonfiniteEntry, entries_from_stats
from tandv_tb.tracking.nonfinite_policy import NonfinitePolicy, StepReport
from tandv_tb.tracking.options import TrackOptions, default_logdir
from tandv_tb.tracking.processes import ONE_PROCESS, ProcessMerge
from tandv_tb.tracking.step_buffer import Entry, Result, StepBuffer, record_item
from tandv_tb.writer import NumericsWriter


class GraphSource(Protocol):
    def end_step(self, entries: Sequence[Entry]) -> ModelGraph | None:
        """The model's graph a tracked step recorded and that is to be written, if any
        (``entries``: what the step recorded)."""
        ...


def is_tracked_step(step: int, every: int) -> bool:
    """Steps 0, every, 2 * every, ... are tracked."""
    return step % every == 0


class TrackerBase:
    """A tracker's step counter, its cadence (steps ``init_step`` + 0, ``every``, ...; and
    the step after the first of a stretch of steps holding NaN/Inf) and its writer.

    A tracked step's statistics gather in ``_buffer`` and end in ``_finish_tracked``,
    merged across the processes of ``_ranks``, with the graph of ``_graph``.

    It also holds what ``on_nonfinite`` does with a step's report: ``_ended`` (at
    ``step()``) and ``_stop_if_nonfinite`` (under ``"raise"``, before the update).

    Subclasses set ``_graph`` (and ``_buffer``, ``_ranks`` where not the defaults), end a
    step with ``_advance``, and say what a tracked step reads at its end
    (``_record_step_end``), what the watch has counted (``_watched_so_far``) and how they
    take themselves off the model (``_detach``).
    """

    def __init__(self, options: TrackOptions) -> None:
        self._options = options
        self._every = options.every
        self._step = options.init_step
        self._active = is_tracked_step(self._step, self._every)
        self._tripped = False  # whether the watch found NaN/Inf in the last step
        self._writer: NumericsWriter | None = None
        self._closed = False
        self._policy = NonfinitePolicy(options.on_nonfinite)
        self._stopped: StepReport | None = None  # the step ended when training was stopped
        self._buffer = StepBuffer()
        self._ranks: ProcessMerge = ONE_PROCESS
        self._graph: GraphSource

    def _open_writer(self, subdirectory: str | None = None) -> None:
        """Write into the user's writer, or into ``logdir`` (default ``runs/<date>_<host>``)
        joined with ``subdirectory``; called by the processes that write."""
        options = self._options
        logdir = None
        if options.writer is None:
            logdir = default_logdir() if options.logdir is None else os.fspath(options.logdir)
            if subdirectory is not None:
                logdir = os.path.join(logdir, subdirectory)
        self._writer = NumericsWriter(logdir, writer=options.writer, formats=options.formats)

    @property
    def current_step(self) -> int:
        """The step that what is recorded now is written at."""
        return self._step

    @property
    def logdir(self) -> str | None:
        """The directory of the event file written to (``None`` where nothing is written:
        distributed ranks or processes other than 0)."""
        return None if self._writer is None else self._writer.logdir

    def _tracking_now(self) -> bool:
        """Whether the current step is tracked (read by hooks as they fire)."""
        return self._active

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this tracker is closed")

    def _advance(self, next_step: int, tripped: bool) -> None:
        """Number the next step ``next_step``; track it if it is on the cadence or if the
        step just ended was the first of a stretch holding NaN/Inf (``tripped``)."""
        onset = tripped and not self._tripped
        self._step = next_step
        self._tripped = tripped
        self._active = onset or is_tracked_step(next_step, self._every)

    def _finish_tracked(self) -> tuple[bool, list[NonfiniteEntry]]:
        """End a tracked step, the one way of both trackers: what it recorded comes to the
        host (one transfer), merged per tensor across calls and processes; the writing
        process writes one record per tensor, the NaN/Inf found, the graph and the
        per-rank runs. Returns whether the watch found NaN/Inf (on any process: all
        agree) and what it found."""
        self._record_step_end()
        results = self._buffer.drain()
        graph = self._graph.end_step([entry for entry, _ in results])
        combined, apart = self._ranks.combine(results)
        found = self._nonfinite(combined + [(entry, merged) for _, entry, merged in apart])
        watching = self._options.watch_nonfinite
        tripped = watching and self._ranks.nonfinite_anywhere(bool(found))
        if self._writer is not None:
            self._writer.add_records(
                self._step,
                (record_item(entry, merged) for entry, merged in combined),
                nonfinite=found,
                stopped=self._policy.stops_before_update,
            )
            if graph is not None:
                self._writer.add_graph(graph, self._step)
            self._ranks.write_apart(self._step, apart)
        return tripped, found

    def _nonfinite(self, results: list[Result]) -> list[NonfiniteEntry]:
        """The NaN/Inf entries of ``results``, where the watch is on."""
        if not self._options.watch_nonfinite:
            return []
        return entries_from_stats((entry.name, entry.tensor_type, s) for entry, s in results)

    def _write_nonfinite(self, found: list[NonfiniteEntry], stopped: bool) -> None:
        """Write an untracked step's NaN/Inf entries (``stopped``: training stops there)."""
        if found and self._writer is not None:
            self._writer.add_nonfinite(self._step, found, stopped)

    def _stop_if_nonfinite(self) -> StepReport | None:
        """Under ``on_nonfinite="raise"``, before the update: read the current step's NaN/Inf
        so far (one read: the statistics recorded so far, which the buffer keeps, or the
        watch's counts) and, where some tensor held NaN/Inf, write the step with the stop,
        flush and raise ``NonFiniteError``; else return the report so far."""
        if self._active:
            found = self._ranks.across(self._nonfinite(self._buffer.results()))
        else:
            found = self._ranks.across(self._watched_so_far())
        if not found:
            return StepReport.of(self._step, found)
        if self._active:
            _, found = self._finish_tracked()
        else:
            self._write_nonfinite(found, stopped=True)
        self._stop(found)  # raises NonFiniteError

    def _ended(self, step: int, found: list) -> StepReport:
        """The report of ``step``, just ended with the NaN/Inf ``found``, acted on by the
        policy (after a flush: what it does next, a raise, loses nothing written)."""
        report = StepReport.of(step, found, checked=self._options.watch_nonfinite)
        if report.nonfinite and self._policy.acts:
            self.flush()
            self._policy.act(report)
        return report

    def _stop(self, found: list) -> None:
        """Training stops at the current step, written already with the NaN/Inf ``found``:
        flush, keep its report for the next ``step()`` and raise ``NonFiniteError``."""
        self._stopped = report = StepReport.of(self._step, found)
        self.flush()
        self._policy.act(report)

    def _take_stopped(self) -> StepReport | None:
        """The report of the step training stopped at, if ``step()`` now ends it."""
        report, self._stopped = self._stopped, None
        return report

    def flush(self) -> None:
        """Write everything recorded so far to disk."""
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        """Take the tracker off the model, write what the current step has recorded
        (without ``step()``), flush and close the writer. Closing twice is fine."""
        self._end(keep_pending=True)

    def _end(self, keep_pending: bool) -> None:
        if self._closed:
            return
        self._closed = True
        self._detach()
        try:
            if keep_pending and self._pending():
                self._write_pending()
        finally:
            self._discard_pending()
            if self._writer is not None:
                self._writer.close()

    def _detach(self) -> None:
        """Remove what the tracker put on the model (nothing by default)."""

    def _record_step_end(self) -> None:
        """Record what a tracked step reads at its end (nothing by default)."""

    def _watched_so_far(self) -> list[NonfiniteEntry]:
        """The NaN/Inf the watch counted in the current untracked step so far, read now."""
        raise NotImplementedError

    def _pending(self) -> bool:
        """Whether ``close`` writes the current step, not ended by ``step()``: where it
        recorded something, and no other process needs to take part."""
        return not self._ranks.combining and len(self._buffer) > 0

    def _write_pending(self) -> None:
        self._finish_tracked()

    def _discard_pending(self) -> None:
        self._buffer.clear()

    def __enter__(self):
        return self

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        """A block left by an exception drops the step it was in; otherwise as ``close``."""
        self._end(keep_pending=exc_type is None)
