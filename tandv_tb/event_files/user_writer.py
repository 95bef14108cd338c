"""A user's ``SummaryWriter`` (``torch.utils.tensorboard``'s or tensorboardX's) as where
numerics events go: into the event file it writes, beside the user's scalars."""

from __future__ import annotations

import sys
import time

from tensorboard.compat.proto import summary_pb2


def _kind(writer: object) -> str | None:
    """'torch' or 'tensorboardX' for a user's SummaryWriter, else None (no imports)."""
    for module, kind in (("torch.utils.tensorboard", "torch"), ("tensorboardX", "tensorboardX")):
        loaded = sys.modules.get(module)
        if loaded is not None and isinstance(writer, loaded.SummaryWriter):
            return kind
    return None


class UserWriter:
    """Summaries written through a user's ``SummaryWriter`` (``TypeError`` for anything
    else); it queues them in its own thread."""

    def __init__(self, writer: object) -> None:
        kind = _kind(writer)
        if kind is None:
            raise TypeError(
                "writer must be a torch.utils.tensorboard.SummaryWriter or a "
                f"tensorboardX.SummaryWriter, got {type(writer).__module__}."
                f"{type(writer).__qualname__}"
            )
        self._writer = writer
        self._kind = kind

    @property
    def logdir(self) -> str:
        if self._kind == "torch":
            return str(self._writer.get_logdir())
        return str(self._writer.logdir)  # tensorboardX's SummaryWriter has no getter

    def add_summary(self, summary: summary_pb2.Summary, step: int) -> None:
        # Private, pinned by tests/project/test_private_api_pins.py: neither SummaryWriter has a
        # public method that writes a Summary proto, and a second event file of our own in
        # its directory would not be "beside its scalars" (TensorBoard's loader without the
        # data server reads only the newest file of a run once it moves to it). It is what
        # the writers' own ``add_*`` methods call, reopening a writer its owner closed (a
        # Lightning logger after an earlier ``fit``), and costs one attribute check a step.
        file_writer = self._writer._get_file_writer()
        if self._kind == "tensorboardX":
            from tensorboardX.proto import summary_pb2 as tbx_summary_pb2

            summary = tbx_summary_pb2.Summary.FromString(summary.SerializeToString())
        file_writer.add_summary(summary, step, time.time())

    def flush(self) -> None:
        self._writer.flush()
