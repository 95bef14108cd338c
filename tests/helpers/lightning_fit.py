"""A tiny Lightning regression and its fit, shared by the Lightning tests."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as L
import torch
from torch import nn

BATCH = 2
FEATURES = 4
HIDDEN = 8


def data(batches: int = 16) -> torch.utils.data.DataLoader:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(batches * BATCH, FEATURES, generator=generator)
    y = x.sum(dim=1, keepdim=True)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=BATCH)


class Regression(L.LightningModule):
    """A two-layer regression; keeps every training loss it computed."""

    def __init__(self, optimizer: bool = True, fail_at: int | None = None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 1))
        self.losses: list[torch.Tensor] = []
        self._optimizer = optimizer
        self._fail_at = fail_at

    def training_step(self, batch, batch_idx):
        if batch_idx == self._fail_at:
            raise RuntimeError("the model broke")
        x, y = batch
        loss = (self.net(x) - y).pow(2).mean()
        self.losses.append(loss.detach().clone())
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", (self.net(x) - y).pow(2).mean())

    def configure_optimizers(self):
        if not self._optimizer:
            return None
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def trainer(root: Path, callbacks=(), package=L, **kwargs):
    options = dict(
        max_steps=6,
        accumulate_grad_batches=2,
        logger=package.loggers.TensorBoardLogger(str(root), name="fit"),
        log_every_n_steps=1,
        callbacks=list(callbacks),
        accelerator="cpu",
        devices=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    options.update(kwargs)
    return package.Trainer(**options)


def fit(root: Path, model: Regression, callbacks=(), **kwargs) -> Path:
    """Fit ``model``; the logger's run folder."""
    run = trainer(root, callbacks, **kwargs)
    run.fit(model, data())
    return Path(run.logger.log_dir)
