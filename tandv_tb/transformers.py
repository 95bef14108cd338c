"""``NumericsCallback``: numerics of a Hugging Face ``transformers.Trainer`` run, in one line.

``Trainer(..., callbacks=[NumericsCallback(every=10)])``. (This module's name is the
library's: imports here are absolute, so ``transformers`` is always the library.)
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from transformers.utils import logging

from tandv_tb.torch import Tracker, track
from tandv_tb.tracking.options import default_logdir
from tandv_tb.trainer_callbacks import (
    WarnOnce,
    checked_options,
    refuse_tracked,
    stopped_before_update,
)

_log = logging.get_logger(__name__)


def _reports_to_tensorboard(args: Any) -> bool:
    report_to = args.report_to
    return "tensorboard" in ([report_to] if isinstance(report_to, str) else report_to or [])


def tensorboard_run(args: Any) -> str:
    """The folder where the Trainer's own ``TensorBoardCallback`` writes its scalars.

    Older transformers write to ``args.logging_dir``. Transformers 5 writes to
    ``$TENSORBOARD_LOGGING_DIR``, else to ``<output_dir>/runs/<date>_<host>``, a name taken
    when its writer starts; its writer is out of a callback's reach (callbacks are handed
    the model and the optimizer, not each other), so the folder is the one holding the
    newest event file that this process wrote under ``<output_dir>/runs``, which that
    writer made just before (its ``on_train_begin`` runs before any user callback's).
    """
    logging_dir = getattr(args, "logging_dir", None)
    if logging_dir is not None:
        return logging_dir
    environment = os.getenv("TENSORBOARD_LOGGING_DIR")
    if environment is not None:
        return os.path.expanduser(environment)
    runs = Path(args.output_dir, "runs")
    ours = f"events.out.tfevents.*.{socket.gethostname()}.{os.getpid()}.*"
    written = [p for p in runs.rglob(ours) if not p.name.endswith(".tandv")]
    if written:
        return str(max(written, key=lambda p: p.stat().st_mtime_ns).parent)
    return os.path.join(args.output_dir, default_logdir())


class NumericsCallback(TrainerCallback):
    """Tracks the numerics of the model that ``Trainer.train`` trains.

    ``options`` are ``tandv_tb.torch.track``'s keywords (``every``, ``formats``,
    ``include``, ``exclude``, ``track_*``, ...), checked here, so a bad one fails at once
    with the tracker's message; ``logdir`` overrides where the numerics go. The callback
    sets the module, the optimizer and the steps itself.

    - **Steps**: one tracked step per optimizer step, numbered ``state.global_step`` as it
      is once that optimizer step is done: the step the Trainer logs its loss at (1, 2,
      ...). With ``gradient_accumulation_steps=k`` a step covers its ``k`` micro-batches.
      The step ends right after ``optimizer.step()``, before the Trainer zeroes the
      gradients, so weight gradients are recorded. ``every=n`` tracks steps n, 2n, ...,
      the steps ``logging_steps=n`` logs the loss at.
    - **Where**: with ``report_to`` including ``"tensorboard"``, into the run folder of the
      Trainer's own TensorBoard scalars (see ``tensorboard_run``), beside the loss;
      otherwise into ``<output_dir>/runs/<date>_<host>``.
    - **Distributed**: statistics combined across ranks, the main process writes (as
      ``track``).
    - **NaN/Inf** (``on_nonfinite``, as ``track`` takes it): under ``"raise"`` a step that
      held NaN/Inf is found before its optimizer step (``on_pre_optimizer_step``), that
      update is skipped (its gradients dropped), the reason is logged with the Trainer's
      logger and training stops (``control.should_training_stop``) without saving a
      checkpoint after it (``control.should_save`` off): the model and the optimizer keep
      the last good step's state. ``"warn"`` and a callable act at the end of the step.
    - Only training is tracked, and only modules in training mode unless
      ``only_training=False``: ``evaluate``/``predict`` without training record nothing
      and warn once. A model already tracked by another tracker is an error at
      ``on_train_begin``. The tracker is closed at ``on_train_end``; ``Trainer`` has no
      event for a ``train()`` that raises, so then the tracker stays attached until
      ``close()`` or the next ``train()``.
    """

    def __init__(self, **options: Any) -> None:
        self._options = checked_options(options)
        self._tracker: Tracker | None = None
        self._trained = False
        self._stopped = False  # training was stopped on NaN/Inf: nothing more is saved
        self._warn_not_training = WarnOnce(
            "NumericsCallback tracks Trainer.train only; evaluate and predict record no numerics"
        )

    @property
    def tracker(self) -> Tracker | None:
        """The tracker of the training under way (``None`` outside one)."""
        return self._tracker

    def on_train_begin(
        self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None, **_
    ) -> None:
        self.close()  # a tracker left by a train() that raised
        refuse_tracked(model)
        self._trained = True
        if self._options.get("logdir") is not None:
            destination = {}
        elif _reports_to_tensorboard(args):
            destination = {"logdir": tensorboard_run(args)}
        else:
            destination = {"logdir": os.path.join(args.output_dir, default_logdir())}
        self._stopped = False
        self._tracker = track(
            model,
            optimizer=optimizer,
            init_step=state.global_step + 1,
            **destination,
            **self._options,
        )

    def on_pre_optimizer_step(
        self, args: Any, state: Any, control: Any, optimizer: Any = None, **_
    ) -> None:
        error = stopped_before_update(self._tracker, optimizer)
        if error is not None:
            self._stopped = True
            control.should_training_stop = True
            _log.warning(f"{error}; training stops, this step's update is skipped")

    def on_step_end(self, args: Any, state: Any, control: Any, **_) -> None:
        if self._stopped:
            control.should_save = False

    def on_epoch_end(self, args: Any, state: Any, control: Any, **_) -> None:
        self.on_step_end(args, state, control)

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **_) -> None:
        # global_step is incremented after this event: the step just ended is global_step+1.
        if self._tracker is not None:
            self._tracker.step(next_step=state.global_step + 2)

    def on_train_end(self, args: Any, state: Any, control: Any, **_) -> None:
        self.close()

    def on_prediction_step(self, args: Any, state: Any, control: Any, **_) -> None:
        if not self._trained:
            self._warn_not_training()

    def close(self) -> None:
        """Detach and flush the tracker (also done at the end of training)."""
        tracker, self._tracker = self._tracker, None
        if tracker is not None:
            tracker.close()
