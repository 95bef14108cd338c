"""``tandv_tb.lightning.NumericsCallback`` under a real ``Trainer(strategy="ddp",
accelerator="cpu", devices=2)``: two processes (gloo), statistics combined across ranks,
rank 0 writing into the logger's run.

Lightning starts the second rank by running this script again, so the test runs this file
as a script; its ``__main__`` part is the fit both ranks run. Each rank saves what it saw
(its activations at step 0, the final weights) for the test to check.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from tests.helpers import REPO

STEPS = 3

pytestmark = [pytest.mark.timeout(300), pytest.mark.distributed]


def _fit(root: Path) -> None:
    import lightning.pytorch as L

    from tandv_tb.lightning import NumericsCallback

    class Regression(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 1))
            self.first: list[torch.Tensor] = []

        def training_step(self, batch, batch_idx):
            x, y = batch
            hidden = self.net[0](x)
            if self.global_step == 0:
                self.first.append(hidden.detach().clone())
            loss = (self.net[2](self.net[1](hidden)) - y).pow(2).mean()
            self.log("train_loss", loss, sync_dist=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    generator = torch.Generator().manual_seed(3)
    x = torch.randn(64, 4, generator=generator) * 10
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=4
    )
    trainer = L.Trainer(
        strategy="ddp",
        accelerator="cpu",
        devices=2,
        max_steps=STEPS,
        accumulate_grad_batches=2,
        logger=L.loggers.TensorBoardLogger(str(root), name="ddp"),
        log_every_n_steps=1,
        callbacks=[NumericsCallback(formats=("float8_e4m3fn",))],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Regression()
    trainer.fit(model, loader)
    torch.save(
        {
            "first": torch.cat(model.first),
            "weight": model.net[0].weight.detach().clone(),
            "log_dir": trainer.log_dir,
        },
        root / f"rank{trainer.global_rank}.pt",
    )


def test_ddp_on_two_cpu_processes_combines_ranks(tmp_path):
    from tandv_tb import read_frame
    from tests.helpers.reference import reference
    from tests.helpers.trainers import numerics_steps, scalars

    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run(
        [sys.executable, __file__, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    run_dir = Path(ranks[0]["log_dir"])
    # DDP kept the ranks' weights equal; each rank saw its own half of the data.
    assert torch.equal(ranks[0]["weight"], ranks[1]["weight"])
    assert not torch.equal(ranks[0]["first"], ranks[1]["first"])

    # Rank 0 alone wrote, into the logger's run, at the loss's steps.
    assert sorted(scalars(run_dir, "train_loss")) == list(range(STEPS))
    steps = numerics_steps(run_dir)
    assert steps[("Activation", "net.0")] == list(range(STEPS))
    assert not list(tmp_path.rglob("rank1"))

    # Step 0's activations of net.0 are both ranks' two accumulated batches, combined.
    frame = read_frame(run_dir, run=".")
    meta = frame["metadata"]
    row = frame[
        (meta["name"] == "net.0") & (meta["tensor_type"] == "Activation") & (meta["step"] == 0)
    ].iloc[0]
    both = torch.cat([ranks[0]["first"], ranks[1]["first"]]).numpy()
    expected = reference(both, ("float8_e4m3fn",))
    ranks_batches_rows_features = 2 * 2 * 4 * 5
    assert row[("scalar_stats", "numel")] == expected["numel"] == ranks_batches_rows_features
    bins = {int(n): int(c) for n, c in row["exponent_counts"].items() if np.isfinite(n) and c}
    assert bins == expected["bins"]
    for name in ("max_abs", "min_abs_nonzero", "mean", "std", "rm2"):
        want = expected["statistics"][name]
        assert row[("scalar_stats", name)] == pytest.approx(want, rel=1e-5, abs=1e-7), name


if __name__ == "__main__":
    _fit(Path(sys.argv[1]))
