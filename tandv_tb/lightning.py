"""``NumericsCallback``: numerics of a PyTorch Lightning training, in one line.

``Trainer(callbacks=[NumericsCallback(every=10)])`` works with ``lightning.pytorch`` and
with the older ``pytorch_lightning`` package (the callback is built on the first of them
that is installed; Lightning accepts either package's callbacks).
"""

from __future__ import annotations

import sys
from typing import Any

from tandv_tb.torch import Tracker, track
from tandv_tb.trainer_callbacks import (
    WarnOnce,
    checked_options,
    refuse_tracked,
    stopped_before_update,
)

try:
    from lightning.pytorch import Callback
    from lightning.pytorch.utilities import rank_zero_warn
except ImportError:  # only the older package is installed
    from pytorch_lightning import Callback
    from pytorch_lightning.utilities import rank_zero_warn


def _tensorboard_logger(trainer: Any) -> Any:
    """The trainer's first ``TensorBoardLogger`` (of either package), or ``None``."""
    classes = tuple(
        loggers.TensorBoardLogger
        for loggers in (
            sys.modules.get("lightning.pytorch.loggers"),
            sys.modules.get("pytorch_lightning.loggers"),
        )
        if loggers is not None
    )
    return next((logger for logger in trainer.loggers if isinstance(logger, classes)), None)


class NumericsCallback(Callback):
    """Tracks the numerics of the ``LightningModule`` that ``Trainer.fit`` trains.

    ``options`` are ``tandv_tb.torch.track``'s keywords (``every``, ``formats``,
    ``include``, ``exclude``, ``track_*``, ...), checked here, so a bad one fails at once
    with the tracker's message; ``logdir`` overrides where the numerics go. The callback
    sets the module, the optimizer and the steps itself.

    - **Steps**: one tracked step per optimizer step, numbered by ``trainer.global_step``
      at its start, the step Lightning logs that batch's ``self.log`` values at: steps 0,
      1, 2, ... of the loss curve and of the numerics are the same optimizer steps. With
      ``accumulate_grad_batches=k`` a step covers its ``k`` batches (activations and
      gradients of all of them); in manual optimization a step ends at the batch where
      ``optimizer.step()`` ran (there Lightning's logger numbers values by batch unless
      the module logs ``self.log("step", float(self.global_step))``, which puts them at
      ``global_step`` too). Where one batch steps several optimizers (manual
      optimization), it is one tracked step, and ``global_step`` (which counts every
      optimizer's steps) moves on by their number; the optimizer state recorded is the
      first optimizer's. ``every=n`` tracks steps 0, n, 2n, ...; Lightning's
      ``log_every_n_steps=n`` logs at steps n-1, 2n-1, ... (log every step to see the loss
      at each tracked step).
    - **Where**: with a ``TensorBoardLogger`` the numerics go through its writer into its
      run (``lightning_logs/version_N``), beside the logged scalars, so the Numerics tab
      puts the loss beside them; otherwise into ``trainer.log_dir``.
    - **Distributed** (DDP and the other strategies of ``torch.distributed``): the
      statistics are combined across ranks and rank 0 writes, as ``track`` does; with
      ``per_rank=True`` each rank writes ``<log_dir>/rank<k>``.
    - **NaN/Inf** (``on_nonfinite``, as ``track`` takes it): under ``"raise"`` a step that
      held NaN/Inf is found once its backward is done (``on_before_optimizer_step``), its
      optimizer update is skipped (its gradients dropped), the reason is logged as a
      Lightning warning and the fit stops (``trainer.should_stop``): the model and the
      optimizer keep the last good step's state, so no checkpoint holds the poisoned one.
      ``"warn"`` and a callable act at the end of the step, as ``track``'s.
    - Only ``fit`` is tracked (``validate``/``test``/``predict`` record nothing and warn
      once), and only the modules in training mode unless ``only_training=False``. A fit
      without an optimizer records nothing and warns once. A model already tracked by
      another tracker is an error at ``on_fit_start``. The tracker is closed at the end of
      the fit and when the fit raises.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__()
        self._options = checked_options(options)
        self._tracker: Tracker | None = None
        self._warn_not_fitting = WarnOnce(
            "NumericsCallback tracks Trainer.fit only; validate, test and predict record "
            "no numerics"
        )
        self._warn_no_optimizer = WarnOnce(
            "NumericsCallback: this fit has no optimizer (configure_optimizers returned "
            "None), so no numerics are recorded"
        )
        self._warn_several_optimizers = WarnOnce(
            "NumericsCallback records the optimizer state of the first optimizer only"
        )

    @property
    def tracker(self) -> Tracker | None:
        """The tracker of the fit under way (``None`` outside one)."""
        return self._tracker

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            self._warn_not_fitting()

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        refuse_tracked(pl_module)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        # Here, not at on_fit_start: a resumed fit's global_step is restored in between.
        # Without one, Lightning puts an optimizer of no parameter groups.
        optimizers = [optimizer for optimizer in trainer.optimizers if optimizer.param_groups]
        if not optimizers:
            self._warn_no_optimizer()
            return
        if len(optimizers) > 1:
            self._warn_several_optimizers()
        self._tracker = track(
            pl_module,
            optimizer=optimizers[0],
            init_step=trainer.global_step,
            **self._destination(trainer),
            **self._options,
        )

    def _destination(self, trainer: Any) -> dict[str, Any]:
        """``writer`` or ``logdir`` for ``track``; the same branch on every rank, since
        ``trainer.log_dir`` is a collective."""
        if self._options.get("logdir") is not None:
            return {}
        logger = _tensorboard_logger(trainer)
        if logger is None or self._options.get("per_rank"):
            return {"logdir": trainer.log_dir}
        # Other ranks do not write (their logger's experiment is a stand-in).
        return {"writer": logger.experiment} if trainer.is_global_zero else {}

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        error = stopped_before_update(self._tracker, optimizer)
        if error is not None:
            trainer.should_stop = True
            rank_zero_warn(f"{error}; the fit stops, this step's update is skipped")

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        tracker = self._tracker
        if tracker is not None and trainer.global_step > tracker.current_step:
            tracker.step(next_step=trainer.global_step)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._close()

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self._close()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        tracker, self._tracker = self._tracker, None
        if tracker is not None:  # the failed step's partial records are dropped
            tracker.__exit__(type(exception), exception, exception.__traceback__)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._close()

    def _close(self) -> None:
        tracker, self._tracker = self._tracker, None
        if tracker is not None:
            tracker.close()
