"""``tandv_tb.lightning.NumericsCallback`` in real Lightning fits of a tiny model: steps equal
to ``trainer.global_step`` and to the logged loss's steps, gradient accumulation, manual
optimization, the logger's run, unchanged losses, bad input, and the older
``pytorch_lightning`` package. DDP on two processes is ``test_lightning_ddp.py``."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

L = pytest.importorskip("lightning.pytorch")

from tandv_tb import GraphCaptureWarning, read_frame  # noqa: E402
from tandv_tb.lightning import NumericsCallback  # noqa: E402
from tandv_tb.torch import is_tracked, track  # noqa: E402
from tests.helpers import REPO  # noqa: E402
from tests.helpers.lightning_fit import (  # noqa: E402
    BATCH,
    FEATURES,
    HIDDEN,
    Regression,
    data,
    fit,
    trainer,
)
from tests.helpers.model_graphs import recorded_graph  # noqa: E402
from tests.helpers.reference import assert_record_matches  # noqa: E402
from tests.helpers.torch_models import read_records  # noqa: E402
from tests.helpers.trainers import event_files, numerics_steps, scalars  # noqa: E402

pytestmark = pytest.mark.timeout(180)


class ManualRegression(Regression):
    """Manual optimization, stepping the optimizer every second batch. Lightning's logger
    counts batches here, not optimizer steps: logging ``step`` puts the loss at
    ``global_step``."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        optimizer = self.optimizers()
        x, y = batch
        loss = (self.net(x) - y).pow(2).mean()
        self.losses.append(loss.detach().clone())
        self.manual_backward(loss)
        if batch_idx % 2 == 1:
            self.log("train_loss", loss)
            self.log("step", float(self.global_step))
            optimizer.step()
            optimizer.zero_grad()
        return loss


def test_numerics_at_global_steps_in_the_loggers_run_losses_unchanged(tmp_path):
    plain = Regression()
    fit(tmp_path / "plain", plain)
    tracked = Regression()
    callback = NumericsCallback(formats=("float8_e4m3fn",))
    run_dir = fit(tmp_path / "tracked", tracked, [callback])

    # Tracking changed nothing: every loss and the trained weights are bit-for-bit equal.
    assert len(tracked.losses) == 12  # 6 optimizer steps of 2 accumulated batches
    assert torch.equal(torch.stack(plain.losses), torch.stack(tracked.losses))
    for a, b in zip(plain.parameters(), tracked.parameters()):
        assert torch.equal(a, b)

    # One event file: the logger's, holding its scalars and the numerics.
    assert len(event_files(run_dir)) == 1
    loss_steps = sorted(scalars(run_dir, "train_loss"))
    assert loss_steps == list(range(6))
    steps = numerics_steps(run_dir)
    assert steps[("Activation", "net.0")] == loss_steps
    assert steps[("Weight_Gradient", "net.2.weight")] == loss_steps
    assert steps[("Optimiser_State.exp_avg", "net.0.weight")] == loss_steps

    # Each step covers both accumulated batches: 2 batches x 2 samples x 8 features.
    frame = read_frame(run_dir, run=".")
    meta = frame["metadata"]
    first = frame[(meta["name"] == "net.0") & (meta["tensor_type"] == "Activation")]
    assert first[("scalar_stats", "numel")].tolist() == [2 * BATCH * HIDDEN] * 6
    assert not is_tracked(tracked) and callback.tracker is None


class GradientKeeper(Regression):
    """``Regression`` keeping the weight gradients each optimizer step's update uses, by
    ``global_step`` (Lightning's ``on_before_optimizer_step``: after the step's backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.gradients: dict[int, dict[str, np.ndarray]] = {}

    def on_before_optimizer_step(self, optimizer):
        self.gradients[self.trainer.global_step] = {
            name: p.grad.detach().numpy().copy() for name, p in self.named_parameters()
        }


@pytest.mark.parametrize("accumulate", [1, 2])
def test_weight_gradients_are_those_of_the_steps_own_batches(tmp_path, accumulate):
    """Lightning calls ``optimizer.step(closure)``, the closure running the step's last
    ``training_step``, ``zero_grad`` and backward: the ``Weight_Gradient`` of step k are the
    gradients of step k's own batches, all of them (read when the closure returns: read
    before it runs they were the previous step's, or the first micro-batch's alone), equal
    to a float64 reference of the gradients the update used."""
    model = GradientKeeper()
    callbacks = [NumericsCallback()]
    run_dir = fit(tmp_path, model, callbacks, max_steps=4, accumulate_grad_batches=accumulate)
    assert sorted(model.gradients) == [0, 1, 2, 3]
    records = read_records(str(run_dir))
    for step, gradients in model.gradients.items():
        for name, gradient in gradients.items():
            assert (name, "Weight_Gradient", step) in records, (name, step)
            assert_record_matches(records[name, "Weight_Gradient", step].record, gradient)


def test_every_and_manual_optimization_follow_global_step(tmp_path):
    model = ManualRegression()
    run = trainer(tmp_path, [NumericsCallback(every=2)], accumulate_grad_batches=1)
    run.fit(model, data())
    assert run.global_step == 6 and len(model.losses) == 12
    run_dir = Path(run.logger.log_dir)
    assert sorted(scalars(run_dir, "train_loss")) == list(range(6))
    steps = numerics_steps(run_dir)
    assert steps[("Activation", "net.2")] == [0, 2, 4]
    assert steps[("Weight", "net.0.weight")] == [0, 2, 4]


def test_without_a_tensorboard_logger_it_writes_into_the_log_dir(tmp_path):
    logger = L.loggers.CSVLogger(str(tmp_path), name="csv")
    run = trainer(tmp_path, [NumericsCallback()], logger=logger, max_steps=2)
    run.fit(Regression(), data())
    assert numerics_steps(run.log_dir)[("Activation", "net.0")] == [0, 1]


def test_older_pytorch_lightning_package(tmp_path):
    pl = pytest.importorskip("pytorch_lightning")

    class OldRegression(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Linear(FEATURES, 1)

        def training_step(self, batch, batch_idx):
            loss = (self.net(batch[0]) - batch[1]).pow(2).mean()
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-2)

    run = trainer(tmp_path, [NumericsCallback()], package=pl, max_steps=3)
    run.fit(OldRegression(), data())
    run_dir = Path(run.logger.log_dir)
    assert sorted(scalars(run_dir, "train_loss")) == [0, 1, 2]
    assert numerics_steps(run_dir)[("Weight", "net.weight")] == [0, 1, 2]


def test_bad_options_fail_at_construction_with_the_trackers_messages(tmp_path):
    with pytest.raises(ValueError) as from_track:
        track(nn.Linear(1, 1), logdir=tmp_path, every=0)
    with pytest.raises(ValueError) as from_callback:
        NumericsCallback(every=0)
    assert str(from_callback.value) == str(from_track.value)
    with pytest.raises(ValueError, match="include: invalid regular expression"):
        NumericsCallback(include="(")
    with pytest.raises(TypeError, match="unexpected keyword argument 'evry'"):
        NumericsCallback(evry=2)
    with pytest.raises(TypeError, match="sets optimizer from the trainer"):
        NumericsCallback(optimizer=None)
    with pytest.raises(ValueError, match="float9"):
        NumericsCallback(formats=("float9",))
    assert list(tmp_path.iterdir()) == []  # the check wrote nothing in the working folder


def test_a_model_tracked_already_is_a_clear_error(tmp_path):
    model = Regression()
    refused = pytest.raises(RuntimeError, match="already tracked by another tandv_tb tracker")
    with track(model.net, logdir=tmp_path / "own"), refused:
        fit(tmp_path, model, [NumericsCallback()])
    assert not is_tracked(model)


def test_no_optimizer_or_validation_only_records_nothing_and_warns_once(tmp_path):
    callback = NumericsCallback()
    with pytest.warns(UserWarning, match="no optimizer") as caught:
        fit(tmp_path / "no_optimizer", Regression(optimizer=False), [callback], max_steps=2)
    assert sum("tandv_tb" in str(w.message) for w in caught) == 1
    run = trainer(tmp_path / "validate", [callback], limit_val_batches=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run.validate(Regression(), data())
        run.validate(Regression(), data())
    ours = [w for w in caught if "tandv_tb" in str(w.message)]
    assert len(ours) == 1
    assert "validate, test and predict record no numerics" in str(ours[0].message)
    for folder in (tmp_path / "no_optimizer", tmp_path / "validate"):
        assert not list(folder.rglob("*.tandv"))
        for events in folder.rglob("events.out.tfevents.*"):
            assert b"tandv" not in events.read_bytes()


def test_a_fit_that_raises_detaches_the_tracker(tmp_path):
    model = Regression(fail_at=5)
    callback = NumericsCallback()
    run = trainer(tmp_path, [callback])
    with pytest.raises(RuntimeError, match="the model broke"):
        run.fit(model, data())
    assert callback.tracker is None and not is_tracked(model)
    # Steps 0 and 1 (batches 0-3) were written; the failed step 2 (batch 4 of 4-5) is not.
    assert numerics_steps(run.logger.log_dir)[("Activation", "net.0")] == [0, 1]
    fit(tmp_path / "again", model, [callback], max_steps=1)  # the callback can fit again


def test_only_the_older_package_installed(tmp_path):
    """With ``lightning`` missing, the callback is a ``pytorch_lightning.Callback``."""
    pytest.importorskip("pytorch_lightning")
    code = f"""
import sys
sys.modules["lightning"] = None  # as if not installed
import pytorch_lightning as pl
import torch
from tandv_tb.lightning import NumericsCallback
from tests.helpers.model_graphs import recorded_graph  # noqa: E402
from tests.helpers.trainers import numerics_steps

assert issubclass(NumericsCallback, pl.Callback)
assert not any(name.split(".")[0] == "lightning" for name in sys.modules if sys.modules[name])

class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)
    def training_step(self, batch, batch_idx):
        return (self.net(batch[0]) - batch[1]).pow(2).mean()
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-2)

trainer = pl.Trainer(max_steps=2, logger=pl.loggers.TensorBoardLogger({str(tmp_path)!r}),
                     callbacks=[NumericsCallback()], enable_progress_bar=False,
                     enable_checkpointing=False, enable_model_summary=False)
x = torch.randn(8, 4)
trainer.fit(Model(), torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x), 2))
assert numerics_steps(trainer.logger.log_dir)[("Weight", "net.weight")] == [0, 1]
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


class QuietRegression(Regression):
    """``Regression`` without ``self.log`` in its training step, which dynamo cannot trace
    (Lightning's logging breaks ``torch.compile`` of a whole LightningModule by itself)."""

    def training_step(self, batch, batch_idx):
        x, y = batch
        return (self.net(x) - y).pow(2).mean()


class CompiledNet(Regression):
    """``Regression`` whose network is compiled inside the LightningModule."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.compile(self.net)


@pytest.mark.slow
@pytest.mark.parametrize(
    "make", [lambda: torch.compile(QuietRegression()), CompiledNet], ids=["module", "network"]
)
def test_compiled_models_record_the_eager_tags_without_graph_breaks(tmp_path, make):
    """The eager run's records; its graph too where the step calls a compiled module (a
    whole compiled LightningModule runs its ``training_step`` compiled: no module call is
    seen, and a warning says the graph is not recorded)."""
    from torch._dynamo.utils import counters

    eager_run = fit(tmp_path / "eager", Regression(), [NumericsCallback()])
    torch.compiler.reset()
    breaks = sum(counters["graph_break"].values())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = fit(tmp_path / "compiled", make(), [NumericsCallback()])
    said = [w for w in caught if "tandv_tb" in str(w.message)]
    assert sum(counters["graph_break"].values()) == breaks
    assert numerics_steps(run) == numerics_steps(eager_run)
    if make is CompiledNet:
        assert not said
        assert recorded_graph(run).to_json() == recorded_graph(eager_run).to_json()
    else:
        assert [w.category for w in said] == [GraphCaptureWarning]  # nothing else skipped
        assert "compiled training_step" in str(said[0].message)
