"""``NumericsWriter``: numerics of tensors into TensorBoard event files.

It writes into its own event file (``logdir``, through TensorBoard's ``EventFileWriter``,
no TensorFlow needed) or through a user's ``torch.utils.tensorboard.SummaryWriter`` or
``tensorboardX.SummaryWriter`` into the event file that also holds the user's scalars.

Data reach disk at every ``flush()``, at ``close()``, at interpreter exit and at least
every 30 seconds, so a killed process loses at most the last 30 seconds; the files it
leaves are valid event files.
"""

from __future__ import annotations

import atexit
import contextlib
import numbers
import sys
import threading
import time
from collections.abc import Sequence

import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from tandv_tb import formats as fmt
from tandv_tb.metadata import TagInfo, check_tensor_type
from tandv_tb.stats.record import NumericsRecord
from tandv_tb.summary import numerics_summary

#: Longest time data wait in memory before they are flushed to disk.
FLUSH_SECS = 30


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


def check_float_tensor(tensor: object) -> None:
    """``TypeError`` naming what it got unless ``tensor`` is a float tensor/array with data."""
    if tensor is None or isinstance(tensor, (str, bytes)):
        raise TypeError(
            "add_numerics needs a float tensor (torch tensor, jax array or numpy array), "
            f"got {tensor!r}"
        )
    dtype = getattr(tensor, "dtype", None)
    if dtype is None:
        raise TypeError(
            "add_numerics needs a float tensor (torch tensor, jax array or numpy array), "
            f"got a {type(tensor).__name__}"
        )
    if getattr(tensor, "is_meta", False):
        raise TypeError(
            f"add_numerics got a meta tensor (shape {tuple(tensor.shape)}, {dtype}): it has "
            "no data to summarise"
        )
    try:
        name = fmt.canonical_name(dtype)
        is_float = np.dtype(fmt.numpy_dtype(name)).kind not in "biuc"
    except (TypeError, ValueError):
        is_float = False
    if not is_float:
        raise TypeError(
            f"add_numerics needs a floating-point tensor, got a {type(tensor).__name__} of "
            f"dtype {dtype}"
        )


def _user_writer_kind(writer: object) -> str | None:
    """'torch' or 'tensorboardX' for a user's SummaryWriter, else None (no imports)."""
    for module, kind in (("torch.utils.tensorboard", "torch"), ("tensorboardX", "tensorboardX")):
        loaded = sys.modules.get(module)
        if loaded is not None and isinstance(writer, loaded.SummaryWriter):
            return kind
    return None


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


class NumericsWriter:
    """Writes the numerics of tensors (or precomputed records) as TensorBoard summaries.

    Exactly one of ``logdir`` (a new event file there) and ``writer`` (a
    ``torch.utils.tensorboard.SummaryWriter`` or ``tensorboardX.SummaryWriter``) is given.
    ``formats`` are the low-precision formats whose exact under/overflow ``add_numerics``
    records.
    """

    def __init__(
        self, logdir: str | None = None, *, writer: object = None, formats: Sequence[str] = ()
    ) -> None:
        if (logdir is None) == (writer is None):
            raise ValueError("give exactly one of logdir and writer")
        if isinstance(formats, str):
            formats = (formats,)
        self.formats = tuple(fmt.numpy_dtype(f).name for f in formats)
        self._lock = threading.Lock()
        self._tags: dict[tuple[str, str], TagInfo] = {}
        self._closed = False
        self._timer: _PeriodicFlush | None = None
        if writer is None:
            self._events = EventFileWriter(str(logdir), max_queue_size=1024, flush_secs=FLUSH_SECS)
            self._user_writer = None
            self._kind = "own"
        else:
            kind = _user_writer_kind(writer)
            if kind is None:
                raise TypeError(
                    "writer must be a torch.utils.tensorboard.SummaryWriter or a "
                    f"tensorboardX.SummaryWriter, got {type(writer).__module__}."
                    f"{type(writer).__qualname__}"
                )
            self._events = None
            self._user_writer = writer
            self._kind = kind
            self._timer = _PeriodicFlush(writer.flush, FLUSH_SECS)
        atexit.register(self.close)

    @property
    def logdir(self) -> str:
        """The directory of the event file written to."""
        if self._events is not None:
            return str(self._events.get_logdir())
        return str(self._user_writer._get_file_writer().get_logdir())

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

        record = stats.tensor_stats(tensor, self.formats).to_record()
        self.add_record(name, record, step, tensor_type)

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
        first record."""
        _check_name(name)
        step = _check_step(step)
        check_tensor_type(tensor_type)
        if not isinstance(record, NumericsRecord):
            raise TypeError(f"record must be a NumericsRecord, got {type(record).__name__}")
        with self._lock:
            if self._closed:
                raise ValueError("this NumericsWriter is closed")
            key = (tensor_type, name)
            info = self._tags.get(key)
            first = info is None
            if first:
                info = TagInfo(
                    name=name,
                    tensor_type=tensor_type,
                    module_type=module_type or "",
                    order=len(self._tags) if order is None else int(order),
                    formats=tuple(record.underflow),
                )
            summary = numerics_summary(info, record, with_metadata=first)
            self._tags[key] = info
            self._write(summary, step)

    def _write(self, summary: summary_pb2.Summary, step: int) -> None:
        if self._kind == "own":
            event = event_pb2.Event(wall_time=time.time(), step=step, summary=summary)
            self._events.add_event(event)
            return
        file_writer = self._user_writer._get_file_writer()
        if self._kind == "tensorboardX":
            from tensorboardX.proto import summary_pb2 as tbx_summary_pb2

            summary = tbx_summary_pb2.Summary.FromString(summary.SerializeToString())
        file_writer.add_summary(summary, step, time.time())

    def flush(self) -> None:
        """Write everything recorded so far to disk."""
        with self._lock:
            if self._closed:
                return
            if self._events is not None:
                self._events.flush()
            else:
                self._user_writer.flush()

    def close(self) -> None:
        """Flush and release the event file (a user's writer is flushed, not closed).
        Closing twice is fine."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self.close)
        if self._timer is not None:
            self._timer.stop()
        if self._events is not None:
            self._events.close()
        else:
            with contextlib.suppress(Exception):  # closed by its owner: it flushed then
                self._user_writer.flush()

    def __enter__(self) -> NumericsWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
