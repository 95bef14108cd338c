"""The life of a tracker, both trackers' (``tandv_tb.torch.track``, ``tandv_tb.jax.track``):
its step counter, its cadence (which steps are tracked: ``is_tracked_step``), its writer,
``flush``, ``close`` and the ``with`` block."""

from __future__ import annotations

import os

from tandv_tb.tracking.nonfinite_policy import NonfinitePolicy, StepReport
from tandv_tb.tracking.options import TrackOptions, default_logdir
from tandv_tb.writer import NumericsWriter


def is_tracked_step(step: int, every: int) -> bool:
    """Steps 0, every, 2 * every, ... are tracked."""
    return step % every == 0


class TrackerBase:
    """A tracker's step counter, its cadence (steps ``init_step`` + 0, ``every``, ...; and
    the step after the first of a stretch of steps holding NaN/Inf) and its writer.

    It also holds what ``on_nonfinite`` does with a step's report: ``_ended`` (at
    ``step()``) and ``_stop`` (under ``"raise"``, before the optimizer's update).

    Subclasses end a step with ``_advance`` and say what ``close`` does with a step not
    ended by ``step()`` (``_pending``, ``_write_pending``, ``_discard_pending``) and how
    they take themselves off the model (``_detach``).
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

    def _pending(self) -> bool:
        raise NotImplementedError

    def _write_pending(self) -> None:
        raise NotImplementedError

    def _discard_pending(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        """A block left by an exception drops the step it was in; otherwise as ``close``."""
        self._end(keep_pending=exc_type is None)
