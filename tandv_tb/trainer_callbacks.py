"""What the Lightning and Hugging Face callbacks share: their tracker options, checked when
the callback is made; the error for a model that is tracked already; one-time warnings;
stopping a trainer before the update of a step that held NaN/Inf.

The callbacks themselves are ``tandv_tb.lightning`` and ``tandv_tb.transformers``.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from typing import Any

from torch import nn

from tandv_tb.torch import Tracker, is_tracked, track
from tandv_tb.tracking.nonfinite_policy import NonFiniteError

#: ``track`` keywords that the callback sets from the trainer.
SET_BY_CALLBACK = ("module", "writer", "optimizer", "init_step")


def checked_options(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` for ``track``, checked now by ``track`` itself, so that a bad one fails
    when the callback is made, with the tracker's own message, and options added to
    ``track`` later need no change here.

    The check builds (and closes) a tracker of an empty module writing into a scratch
    folder, which is removed; ``logdir``, the one option naming a place, is only checked to
    be a path.
    """
    taken = [key for key in SET_BY_CALLBACK if key in options]
    if taken:
        raise TypeError(
            f"NumericsCallback sets {', '.join(taken)} from the trainer; leave "
            f"{'it' if len(taken) == 1 else 'them'} out"
        )
    if options.get("logdir") is not None:
        os.fspath(options["logdir"])
    with tempfile.TemporaryDirectory(prefix="tandv_tb_options_") as scratch:
        track(nn.Module(), **{**options, "logdir": scratch}).close()
    return dict(options)


def refuse_tracked(model: nn.Module) -> None:
    """A clear error where ``model`` (or a module in it) is tracked by an open tracker:
    two trackers' hooks on one model would record everything twice."""
    if is_tracked(model):
        raise RuntimeError(
            f"tandv_tb: {type(model).__name__} is already tracked by another tandv_tb "
            "tracker (tandv_tb.torch.track or a second NumericsCallback); close that "
            "tracker, or remove one of them"
        )


class WarnOnce:
    """Warns with ``message`` the first time it is called, and never again."""

    def __init__(self, message: str) -> None:
        self._message = message
        self._done = False

    def __call__(self) -> None:
        if not self._done:
            self._done = True
            warnings.warn(f"tandv_tb: {self._message}", UserWarning, stacklevel=3)


def stopped_before_update(tracker: Tracker | None, optimizer: Any) -> NonFiniteError | None:
    """Under ``on_nonfinite="raise"``, once the step's backward is done and before its
    optimizer update: the ``NonFiniteError`` of a step that held NaN/Inf (the tracker
    wrote it, with the stop), its gradients dropped so that the optimizer leaves the
    weights and its state as they are; None for a clean step.

    A trainer stops cleanly where the tracker alone would raise out of its loop: the
    optimizer still runs its step, and a parameter without a gradient is one it skips.
    """
    if tracker is None:
        return None
    try:
        tracker.stop_if_nonfinite()
    except NonFiniteError as error:
        optimizer.zero_grad(set_to_none=True)  # Accelerate's wrapper passes it on
        return error
    return None
