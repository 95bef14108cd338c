"""The trainer callbacks under ``on_nonfinite="raise"``: a real Lightning fit and a real
Hugging Face ``Trainer`` run whose model turns NaN/Inf at a known step stop cleanly there,
with the update of that step skipped, and every checkpoint they saved finite."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from tandv_tb.event_files.nonfinite import read_nonfinite

pytestmark = pytest.mark.timeout(300)

POISONED_STEP = 7  # the trainer's step number at which the poisoned batch is trained


def _poison(module: torch.nn.Module, poisoned: list[bool]) -> None:
    """Multiply ``module``'s output by inf while ``poisoned[0]`` (a forward hook)."""
    module.register_forward_hook(lambda m, args, out: out * math.inf if poisoned[0] else out)


def _finite(tensors) -> bool:
    return all(torch.isfinite(t).all() for t in tensors if t.is_floating_point())


def _poison_gradient(parameter: torch.Tensor, poisoned: list[bool]) -> None:
    """Multiply ``parameter``'s gradient by inf while ``poisoned[0]``: only it holds Inf."""
    parameter.register_hook(lambda grad: grad * math.inf if poisoned[0] else grad)


# Where the NaN/Inf is made, and the first tensor recorded holding it (type, name).
LIGHTNING_POISONS = {
    "activation": (lambda model, poisoned: _poison(model.net[0], poisoned), "Activation", "net.0"),
    # Read by the callback's check inside Lightning's closure, before the optimizer's.
    "weight gradient only": (
        lambda model, poisoned: _poison_gradient(model.net[2].weight, poisoned),
        "Weight_Gradient",
        "net.2.weight",
    ),
}


@pytest.mark.parametrize("where", list(LIGHTNING_POISONS))
def test_lightning_stops_before_the_update(tmp_path, where):
    import lightning.pytorch as L

    from tandv_tb.lightning import NumericsCallback
    from tests.helpers.lightning_fit import Regression, data

    model = Regression()
    poisoned = [False]
    poison, first_type, first_name = LIGHTNING_POISONS[where]
    poison(model, poisoned)
    weights: dict[int, list[torch.Tensor]] = {}

    class Watcher(L.Callback):
        """Poisons the batch of the poisoned step; keeps the weights at each step's start."""

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            poisoned[0] = trainer.global_step == POISONED_STEP
            weights[trainer.global_step] = [p.detach().clone() for p in pl_module.parameters()]

    checkpoints = tmp_path / "checkpoints"
    trainer = L.Trainer(
        max_steps=12,
        logger=L.loggers.TensorBoardLogger(str(tmp_path), name="fit"),
        callbacks=[
            Watcher(),
            NumericsCallback(every=10, on_nonfinite="raise"),
            L.callbacks.ModelCheckpoint(
                dirpath=checkpoints, every_n_train_steps=1, save_top_k=-1, save_last=True
            ),
        ],
        accelerator="cpu",
        devices=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    with pytest.warns(UserWarning, match=f"step {POISONED_STEP}.*'{first_name}'.*the fit stops"):
        trainer.fit(model, data())
    # It stopped at the poisoned step, whose update was skipped.
    assert trainer.should_stop
    assert trainer.global_step <= POISONED_STEP + 1
    after = list(model.parameters())
    assert all(torch.equal(a, b) for a, b in zip(after, weights[POISONED_STEP]))
    (stopped,) = read_nonfinite(trainer.logger.log_dir)
    assert stopped.step == POISONED_STEP and stopped.stopped
    assert (stopped.entries[0].tensor_type, stopped.entries[0].name) == (first_type, first_name)
    saved = sorted(checkpoints.glob("*.ckpt"))
    assert saved, "ModelCheckpoint saved nothing"
    for path in saved:
        state = torch.load(path, map_location="cpu", weights_only=False)["state_dict"]
        assert _finite(state.values()), path.name


def test_hugging_face_stops_before_the_update(tmp_path):
    transformers = pytest.importorskip("transformers")
    from safetensors.torch import load_file

    from tandv_tb.transformers import NumericsCallback
    from tests.integrations.test_transformers import LossKeepingTrainer, Tokens, gpt2

    model = gpt2()
    poisoned = [False]
    _poison(model.transformer.h[0].mlp, poisoned)
    weights: dict[int, list[torch.Tensor]] = {}

    class Watcher(transformers.TrainerCallback):
        """Poisons the batches of the poisoned step; keeps the weights at each step's start
        (``state.global_step`` counts the steps done: the step trained is one more)."""

        def on_step_begin(self, args, state, control, model=None, **_):
            poisoned[0] = state.global_step + 1 == POISONED_STEP
            weights[state.global_step + 1] = [p.detach().clone() for p in model.parameters()]

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=12,
        per_device_train_batch_size=2,
        learning_rate=1e-3,
        logging_steps=1,
        report_to=["tensorboard"],
        save_strategy="steps",
        save_steps=1,
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    callback = NumericsCallback(every=10, on_nonfinite="raise")
    trainer = LossKeepingTrainer(
        model=model, args=args, train_dataset=Tokens(), callbacks=[Watcher(), callback]
    )
    trainer.losses = []
    trainer.train()
    assert trainer.state.global_step == POISONED_STEP  # the step ran, without its update
    after = list(model.parameters())
    assert all(torch.equal(a, b) for a, b in zip(after, weights[POISONED_STEP]))
    runs = [p.parent for p in Path(tmp_path).rglob("events.out.tfevents.*.tandv")]
    (stopped,) = read_nonfinite(runs[0])
    assert stopped.step == POISONED_STEP and stopped.stopped
    assert stopped.entries[0].name == "transformer.h.0.mlp"
    saved = sorted(Path(tmp_path).glob("checkpoint-*"))
    steps = sorted(int(p.name.split("-")[1]) for p in saved)
    assert steps == list(range(1, POISONED_STEP)), steps  # none after the last good step
    for path in saved:
        assert _finite(load_file(path / "model.safetensors").values()), path.name
