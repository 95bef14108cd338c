"""``NumericsWriter``: numerics of tensors into TensorBoard event files.

It writes into its own event files under ``logdir`` or through a user's
``torch.utils.tensorboard.SummaryWriter`` or ``tensorboardX.SummaryWriter`` into the
event file that also holds the user's scalars.

The records of one call of ``add_records`` (a tracker's whole step) go into one ``Event``
whose ``Summary`` holds one value per tag. Records given one at a time (``add_numerics``,
``add_record``: written by hand, one call per tensor) are gathered per step and written as
one event when a record of another step comes, at ``flush()``, ``close()``, at
interpreter exit and at least every ``FLUSH_SECS`` (30) seconds: a step's records are one
event, as a tracker's are, which readers decode much faster than one event per tensor.

Where the events go:

- ``logdir`` a local folder (a path or a ``file://`` URL, ``storage.locations.is_local``):
  one event file, appended with each event (``tandv_tb.event_files.event_file``). Every event
  reaches the operating system when it is written, so a killed process loses nothing
  written and leaves a valid event file, at worst ending in a half-written record that
  readers skip.
- ``logdir`` any other fsspec URL (``s3://``, ``gs://``, ``abfs://``, ...): object stores
  cannot append, so each flush (``flush()``, ``close()``, interpreter exit, and every
  ``FLUSH_SECS`` seconds) writes the events since the last one as a new event file object
  of the run, whose names sort in write order (``tandv_tb.event_files.event_objects``). A killed
  process loses what it recorded since the last flush: at most ``FLUSH_SECS`` seconds.
- A user's writer (``tandv_tb.event_files.user_writer``) queues the event in its own thread; it
  is flushed at every ``flush()``, at ``close()``, at interpreter exit and at least every
  ``FLUSH_SECS`` seconds.

Writing never stops training: a write that fails (disk full, directory removed, storage
denied or unreachable, a user's writer that failed or was closed) warns once with a
``WriteFailureWarning`` naming the logdir and the error, and records are dropped until
writing works again. Every ``RETRY_SECS`` seconds the writer tries again, in a new event
file of the same logdir (the failed one may end in a half-written record); a recovery warns
with the number of records dropped. Writing is thread-safe: one lock orders every event of
a writer.
"""

from __future__ import annotations

import atexit
import contextlib
import numbers
import os
import threading
import time
import warnings
import weakref
from collections.abc import Iterable, Mapping, Sequence

from tensorboard.compat.proto import event_pb2, summary_pb2

from tandv_tb import formats as fmt
from tandv_tb.event_files.event_file import EventFile
from tandv_tb.event_files.event_objects import EventObjects
from tandv_tb.event_files.graph_record import ModelGraph, encode_graph
from tandv_tb.event_files.metadata import TagInfo, check_tensor_type
from tandv_tb.event_files.nonfinite_record import NonfiniteEntry, encode_nonfinite
from tandv_tb.event_files.record import NumericsRecord
from tandv_tb.event_files.summary import numerics_value
from tandv_tb.event_files.user_writer import UserWriter
from tandv_tb.filesystems.locations import is_local, location
from tandv_tb.hand_written import HandWrittenStep, RecordItem

#: Longest time records wait before they are flushed: in a user's writer, in a step of
#: hand-written records, or (object storage) in memory before the next object is written.
FLUSH_SECS = 30
#: Seconds between attempts to write again after a write failed.
RETRY_SECS = 30


class WriteFailureWarning(RuntimeWarning):
    """Numerics could not be written (or are written again after a failure); training goes
    on and the records in between are dropped."""


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty string, got {name!r}")
    return name


def _check_step(step: object) -> int:
    if isinstance(step, bool) or not isinstance(step, numbers.Integral):
        raise TypeError(f"step must be an int, got {type(step).__name__} {step!r}")
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    return int(step)


def _check_item(item: RecordItem) -> None:
    _check_name(item.name)
    check_tensor_type(item.tensor_type)
    if not isinstance(item.record, NumericsRecord):
        raise TypeError(f"record must be a NumericsRecord, got {type(item.record).__name__}")


def check_float_tensor(tensor: object) -> None:
    """``TypeError`` naming what it got unless ``tensor`` is a float tensor/array with data
    (``stats.inputs.untrackable_reason``)."""
    from tandv_tb.stats.inputs import untrackable_reason

    reason = untrackable_reason(tensor)
    if reason is not None:
        raise TypeError(f"add_numerics needs a float tensor with values: {reason}")


class _PeriodicFlush:
    """A daemon thread calling ``flush`` every ``interval`` seconds until stopped."""

    def __init__(self, flush, interval: float) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(flush, interval), name="tandv_tb-flush", daemon=True
        )
        self._thread.start()

    def _run(self, flush, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                flush()
            except Exception:  # the user's writer may be closed: nothing left to flush
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()


class _Failure:
    """Whether writing has failed, when to try again and how many records were dropped."""

    def __init__(self) -> None:
        self.active = False
        self.dropped = 0
        self._retry_at = 0.0

    def start(self, dropped: int) -> bool:
        """Note a failed write that dropped ``dropped`` records; True where it is the
        first."""
        first = not self.active
        if first:
            self.active, self.dropped = True, 0
        self.dropped += dropped
        self._retry_at = time.monotonic() + RETRY_SECS
        return first

    def due(self) -> bool:
        """Whether it is time to try writing again."""
        return time.monotonic() >= self._retry_at

    def end(self) -> int:
        """Writing works again: the number of records dropped meanwhile."""
        self.active = False
        return self.dropped


def _close_before_executors_stop(writer: NumericsWriter) -> None:
    """Close ``writer`` at interpreter exit before ``concurrent.futures`` stops taking work:
    fsspec's filesystems (aiohttp) resolve names on an executor, so the last object of a
    writer closed by ``atexit`` (later) could not be written. A weak reference: a writer
    closed and dropped before is not kept alive."""
    # Private, pinned by tests/project/test_private_api_pins.py: Python's own hook for
    # what must run before executors shut down (concurrent.futures registers there too).
    ref = weakref.ref(writer)

    def close() -> None:
        found = ref()
        if found is not None:
            found.close()

    threading._register_atexit(close)


def _event_sink(logdir: str) -> EventFile | EventObjects:
    """Where a writer of its own puts its events: a local folder (``is_local``) appends to
    one event file, any other URL writes a new object per flush."""
    if is_local(logdir):
        return EventFile(location(logdir).root)
    return EventObjects(logdir)


class NumericsWriter:
    """Writes the numerics of tensors (or precomputed records) as TensorBoard summaries.

    Exactly one of ``logdir`` (a new event file there) and ``writer`` (a
    ``torch.utils.tensorboard.SummaryWriter`` or ``tensorboardX.SummaryWriter``) is given.
    ``formats`` are the low-precision formats whose exact under/overflow ``add_numerics``
    records: element formats and block-scaled ones (``formats.check_formats``).
    """

    def __init__(
        self, logdir: str | None = None, *, writer: object = None, formats: Sequence[str] = ()
    ) -> None:
        if (logdir is None) == (writer is None):
            raise ValueError("give exactly one of logdir and writer")
        self.formats = fmt.check_formats(formats)
        self._lock = threading.Lock()
        self._tags: dict[tuple[str, str], TagInfo] = {}
        self._described: set[tuple[str, str]] = set()  # tags whose metadata were written
        self._failure = _Failure()
        self._closed = False
        self._step_records = HandWrittenStep()
        self._graph = b""  # the last graph written (its record's JSON)
        self._user_writer = None if writer is None else UserWriter(writer)
        self._events = _event_sink(os.fspath(logdir)) if writer is None else None
        self._timer = _PeriodicFlush(self.flush, FLUSH_SECS)
        self._where = self.logdir
        atexit.register(self.close)
        if isinstance(self._events, EventObjects):
            _close_before_executors_stop(self)

    @property
    def logdir(self) -> str:
        """The directory (or URL) of the event files written to."""
        return (self._user_writer or self._events).logdir

    def add_numerics(
        self, name: str, tensor: object, step: int, tensor_type: str = "Activation"
    ) -> None:
        """Record the numerics of a float tensor (torch, jax or numpy) at ``step``.

        NaN, Inf, empty and 0-d tensors are recorded like any other.
        """
        _check_name(name)
        step = _check_step(step)
        check_tensor_type(tensor_type)
        check_float_tensor(tensor)
        from tandv_tb import stats

        pending = stats.compute(tensor, self.formats)  # brought to the host with its step
        self._add_hand_written(RecordItem(name, pending, tensor_type), step)

    def add_record(
        self,
        name: str,
        record: NumericsRecord,
        step: int,
        tensor_type: str = "Activation",
        module_type: str = "",
        order: int | None = None,
    ) -> None:
        """Record statistics computed elsewhere. ``order`` defaults to the first-seen
        order of tags in this writer; ``module_type`` and ``order`` are fixed by a tag's
        first record. Gathered with the other records of the step into one event (see
        the module's doc)."""
        step = _check_step(step)
        item = RecordItem(name, record, tensor_type, module_type, order)
        _check_item(item)
        self._add_hand_written(item, step)

    def _add_hand_written(self, item: RecordItem, step: int) -> None:
        with self._lock:
            if self._closed:
                raise ValueError("this NumericsWriter is closed")
            if self._step_records and step != self._step_records.step:
                self._write_step_records()
            self._step_records.add(step, item)

    def add_nonfinite(
        self, step: int, entries: Iterable[NonfiniteEntry], stopped: bool = False
    ) -> None:
        """Record the tensors found holding NaN/Inf at ``step`` (in execution order; see
        ``tandv_tb.event_files.nonfinite_record``); nothing is written for none. ``stopped``:
        the tracker stopped training at this step."""
        self.add_records(step, [], nonfinite=entries, stopped=stopped)

    def add_graph(self, graph: ModelGraph | Mapping, step: int = 0) -> None:
        """Record the model's graph, shown by the tab's Graph view: a ``ModelGraph`` or its
        JSON object (``tandv_tb.event_files.graph_record``), checked first (``GraphError`` says
        what is wrong). The run's graph is the last one written; one equal to the last
        this writer wrote is not written again."""
        step = _check_step(step)
        value = encode_graph(graph)
        with self._lock:
            if self._closed:
                raise ValueError("this NumericsWriter is closed")
            if value.tensor.string_val[0] == self._graph:
                return
            self._write_step_records()
            if self._write(summary_pb2.Summary(value=[value]), step, 1):
                self._graph = value.tensor.string_val[0]

    def add_records(
        self,
        step: int,
        items: Iterable[RecordItem],
        nonfinite: Iterable[NonfiniteEntry] = (),
        stopped: bool = False,
    ) -> None:
        """Record several tags at ``step`` in one event (as ``add_record`` each), with the
        step's non-finite tensors (as ``add_nonfinite``) where there are some; everything
        is checked before anything is written."""
        step = _check_step(step)
        nonfinite = list(nonfinite)
        extra = [encode_nonfinite(nonfinite, stopped)] if nonfinite else []
        items = list(items)
        for item in items:
            _check_item(item)
        with self._lock:
            if self._closed:
                raise ValueError("this NumericsWriter is closed")
            self._write_step_records()
            self._write_items(step, items, extra)

    def _write_step_records(self) -> None:
        """Write the hand-written records of the current step as one event (under the
        lock)."""
        if self._step_records:
            step = self._step_records.step
            self._write_items(step, self._step_records.take(), [])

    def _write_items(self, step: int, items: list[RecordItem], extra: list) -> None:
        """One event of ``items`` and ``extra`` values at ``step`` (under the lock)."""
        keys, values = [], []
        for item in items:
            key = (item.tensor_type, item.name)
            info = self._tags.get(key)
            if info is None:
                info = self._tags[key] = TagInfo(
                    name=item.name,
                    tensor_type=item.tensor_type,
                    module_type=item.module_type or "",
                    order=len(self._tags) if item.order is None else int(item.order),
                    formats=tuple(item.record.underflow),
                    block_formats=tuple(item.record.blocks),
                )
            values.append(numerics_value(info, item.record, key not in self._described))
            keys.append(key)
        values += extra
        if values and self._write(summary_pb2.Summary(value=values), step, len(values)):
            self._described.update(keys)

    def _write(self, summary: summary_pb2.Summary, step: int, records: int) -> bool:
        """Write one summary of ``records`` records; False where it was dropped (writing
        failed)."""
        failed = self._failure.active
        if failed and not self._failure.due():
            self._failure.dropped += records
            return False
        if failed and not self._reopen(records):
            return False
        try:
            self._emit(summary, step)
        except Exception as error:  # tracking never stops training
            self._fail(error, records)
            return False
        if failed:
            dropped = self._failure.end()
            warnings.warn(
                f"tandv_tb: writing numerics to {self._where!r} again; at least {dropped} "
                "records were dropped while writing failed.",
                WriteFailureWarning,
                stacklevel=4,
            )
        return True

    def _reopen(self, records: int) -> bool:
        """Own writer: a new event file in place of the failed one. True where it opened."""
        if self._user_writer is not None:
            return True  # a user's writer is simply tried again
        try:
            self._events = _event_sink(self._where)
        except Exception as error:
            self._fail(error, records)
            return False
        return True

    def _fail(self, error: Exception, records: int = 0) -> None:
        """A write failed (its ``records`` are dropped): warn where writing worked until
        now; try again after ``RETRY_SECS``."""
        self._described.clear()  # the next file (or the user's, repaired) needs metadata
        if self._failure.start(records):
            warnings.warn(
                f"tandv_tb: could not write numerics to {self._where!r}: "
                f"{type(error).__name__}: {error}. Training goes on; numerics are dropped "
                f"until writing works again (tried every {RETRY_SECS} s).",
                WriteFailureWarning,
                stacklevel=5,
            )

    def _emit(self, summary: summary_pb2.Summary, step: int) -> None:
        if self._user_writer is not None:
            self._user_writer.add_summary(summary, step)
            return
        event = event_pb2.Event(wall_time=time.time(), step=step, summary=summary)
        try:
            self._events.write(event)
        except Exception:
            self._drop_kept()  # object storage: what was kept is lost with this write
            raise

    def flush(self) -> None:
        """Write everything recorded so far: the step of hand-written records, then a
        user's writer is flushed, or the events kept for object storage are written as a
        new object (a failure warns, as at a write)."""
        with self._lock:
            if self._closed:
                return
            self._flush()

    def _flush(self) -> None:
        """``flush`` under the lock."""
        self._write_step_records()
        if self._failure.active:
            return
        try:
            if self._user_writer is not None:
                self._user_writer.flush()
            elif isinstance(self._events, EventObjects):
                self._events.flush()
        except Exception as error:  # tracking never stops training
            self._fail(error, self._drop_kept())

    def _drop_kept(self) -> int:
        """Forget the events kept for object storage (their write failed): how many."""
        if not isinstance(self._events, EventObjects):
            return 0
        kept = self._events.pending_events
        self._events.discard()
        return kept

    def close(self) -> None:
        """Flush (a user's writer is flushed, not closed); no more records are taken.
        Closing twice is fine."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._write_step_records()
            if self._user_writer is None:
                self._flush()
        atexit.unregister(self.close)
        self._timer.stop()
        if self._user_writer is not None:
            with contextlib.suppress(Exception):  # closed by its owner: it flushed then
                self._user_writer.flush()

    def __enter__(self) -> NumericsWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
