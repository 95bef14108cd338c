"""``tandv_tb.transformers.NumericsCallback`` in a real ``transformers.Trainer`` run of a
tiny GPT-2 built from a config (no download): one tracked step per optimizer step at
``state.global_step``, in the run of the Trainer's own TensorBoard scalars, with gradient
accumulation, unchanged losses, and bad input."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from tandv_tb import read_frame  # noqa: E402
from tandv_tb.torch import is_tracked, track  # noqa: E402
from tandv_tb.transformers import NumericsCallback  # noqa: E402
from tests.helpers.trainers import numerics_steps, scalars  # noqa: E402

pytestmark = pytest.mark.timeout(240)

VOCAB = 64
LENGTH = 8
BATCH = 2
STEPS = 4


class Tokens(torch.utils.data.Dataset):
    """Sixteen fixed random token sequences, their own labels."""

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(5)
        self.ids = torch.randint(0, VOCAB, (16, LENGTH), generator=generator)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


def gpt2() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=VOCAB,
        n_positions=LENGTH,
        n_embd=32,
        n_layer=2,
        n_head=2,
        use_cache=False,
        bos_token_id=0,
        eos_token_id=0,
    )
    return transformers.GPT2LMHeadModel(config)


class LossKeepingTrainer(transformers.Trainer):
    """A ``Trainer`` that keeps every micro-batch's loss, unrounded."""

    def compute_loss(self, model, inputs, *args, **kwargs):
        loss = super().compute_loss(model, inputs, *args, **kwargs)
        self.losses.append((loss[0] if isinstance(loss, tuple) else loss).detach().clone())
        return loss


def train(output_dir: Path, callbacks=(), **kwargs) -> LossKeepingTrainer:
    options = dict(
        output_dir=str(output_dir),
        max_steps=STEPS,
        per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=2,
        learning_rate=1e-3,
        logging_steps=1,
        report_to=["tensorboard"],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    options.update(kwargs)
    trainer = LossKeepingTrainer(
        model=gpt2(),
        args=transformers.TrainingArguments(**options),
        train_dataset=Tokens(),
        callbacks=list(callbacks),
    )
    trainer.losses = []
    trainer.train()
    return trainer


def run_folders(output_dir: Path) -> list[Path]:
    return sorted({p.parent for p in (output_dir / "runs").rglob("events.out.tfevents.*")})


def test_numerics_beside_the_trainers_loss_at_its_steps_losses_unchanged(tmp_path):
    plain = train(tmp_path / "plain")
    callback = NumericsCallback(formats=("float8_e4m3fn",))
    tracked = train(tmp_path / "tracked", [callback])

    # Tracking changed nothing: every loss and the trained weights are bit-for-bit equal.
    assert len(tracked.losses) == 2 * STEPS
    assert torch.equal(torch.stack(plain.losses), torch.stack(tracked.losses))
    for a, b in zip(plain.model.parameters(), tracked.model.parameters()):
        assert torch.equal(a, b)

    # One run folder holds the Trainer's scalars and the numerics, at the same steps.
    (run_dir,) = run_folders(tmp_path / "tracked")
    loss_steps = sorted(scalars(run_dir, "train/loss"))
    assert loss_steps == list(range(1, STEPS + 1))
    steps = numerics_steps(run_dir)
    assert steps[("Activation", "transformer.h.0.mlp.c_fc")] == loss_steps
    assert steps[("Gradient", "transformer.h.1.attn")] == loss_steps
    assert steps[("Weight_Gradient", "transformer.h.0.attn.c_attn.weight")] == loss_steps
    assert steps[("Optimiser_State.exp_avg_sq", "transformer.wte.weight")] == loss_steps

    # Each step covers both accumulated micro-batches: 2 x 2 sequences x 8 tokens x 128.
    frame = read_frame(run_dir, run=".")
    meta = frame["metadata"]
    fc = frame[(meta["name"] == "transformer.h.0.mlp.c_fc") & (meta["tensor_type"] == "Activation")]
    assert fc[("scalar_stats", "numel")].tolist() == [2 * BATCH * LENGTH * 128] * STEPS
    assert callback.tracker is None and not is_tracked(tracked.model)


@pytest.mark.slow
def test_a_trainer_that_compiles_its_model_trains_unchanged_with_the_eager_records(tmp_path):
    """``TrainingArguments(torch_compile=True)``: the compiled model trains bit for bit as
    without tracking, tracking adds no graph break to transformers' own, and the records
    are those of eager training."""
    from torch._dynamo.utils import counters

    eager = train(tmp_path / "eager", [NumericsCallback()], max_steps=1)
    (eager_run,) = run_folders(tmp_path / "eager")

    def breaks() -> int:
        return sum(counters["graph_break"].values())

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # two threads: two plain compiled runs already differ
    try:
        torch.compiler.reset()
        before = breaks()
        plain = train(tmp_path / "plain", torch_compile=True)
        plain_breaks = breaks() - before  # transformers' own (its logging)
        torch.compiler.reset()
        before = breaks()
        tracked = train(tmp_path / "tracked", [NumericsCallback()], torch_compile=True)
        tracked_breaks = breaks() - before
    finally:
        torch.set_num_threads(threads)
    assert tracked_breaks == plain_breaks
    assert torch.equal(torch.stack(plain.losses), torch.stack(tracked.losses))
    for a, b in zip(plain.model.parameters(), tracked.model.parameters()):
        assert torch.equal(a, b)
    (run_dir,) = run_folders(tmp_path / "tracked")
    steps = numerics_steps(run_dir)
    assert steps[("Gradient", "transformer.h.1.attn")] == list(range(1, STEPS + 1))
    assert set(steps) == set(numerics_steps(eager_run))
    assert eager.model is not None


def test_every_and_the_tensorboard_logging_dir_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "chosen"))
    train(tmp_path / "out", [NumericsCallback(every=2)], gradient_accumulation_steps=1)
    assert sorted(scalars(tmp_path / "chosen", "train/loss")) == [1, 2, 3, 4]
    assert numerics_steps(tmp_path / "chosen")[("Weight", "transformer.wte.weight")] == [2, 4]


def test_without_tensorboard_reporting_it_writes_under_output_dir_runs(tmp_path):
    train(tmp_path, [NumericsCallback(include="^lm_head")], report_to=[], max_steps=1)
    (run_dir,) = run_folders(tmp_path)
    assert set(numerics_steps(run_dir)) == {("Activation", "lm_head"), ("Gradient", "lm_head")}


def test_bad_options_and_a_tracked_model_fail_clearly(tmp_path):
    with pytest.raises(ValueError, match="every must be a positive integer, got -1"):
        NumericsCallback(every=-1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'format'"):
        NumericsCallback(format="float8_e4m3fn")
    model = gpt2()
    trainer = transformers.Trainer(
        model=model,
        args=transformers.TrainingArguments(
            output_dir=str(tmp_path), max_steps=1, report_to=[], use_cpu=True
        ),
        train_dataset=Tokens(),
        callbacks=[NumericsCallback()],
    )
    refused = pytest.raises(RuntimeError, match="already tracked by another tandv_tb tracker")
    with track(model.transformer.h[0], logdir=tmp_path / "own"), refused:
        trainer.train()


def test_evaluation_alone_records_nothing_and_warns_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # without train(), the TensorBoard callback writes to ./runs
    trainer = transformers.Trainer(
        model=gpt2(),
        args=transformers.TrainingArguments(
            output_dir=str(tmp_path), report_to=["tensorboard"], use_cpu=True
        ),
        eval_dataset=Tokens(),
        callbacks=[NumericsCallback()],
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.evaluate()
        trainer.evaluate()
    ours = [w for w in caught if "tandv_tb" in str(w.message)]
    assert len(ours) == 1 and "evaluate and predict record no numerics" in str(ours[0].message)
    assert not list(tmp_path.rglob("*.tandv"))


class FailingTrainer(LossKeepingTrainer):
    """Raises in its second step."""

    def compute_loss(self, model, inputs, *args, **kwargs):
        if len(self.losses) == 1:
            raise RuntimeError("the model broke")
        return super().compute_loss(model, inputs, *args, **kwargs)


def test_a_train_that_raises_leaves_the_tracker_to_the_next_train_or_close(tmp_path):
    callback = NumericsCallback()
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=2,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    failing = FailingTrainer(model=gpt2(), args=args, train_dataset=Tokens(), callbacks=[callback])
    failing.losses = []
    with pytest.raises(RuntimeError, match="the model broke"):
        failing.train()
    # No Trainer event follows an exception: the tracker stays until the next train().
    assert callback.tracker is not None and is_tracked(failing.model)
    trainer = LossKeepingTrainer(
        model=failing.model, args=args, train_dataset=Tokens(), callbacks=[callback]
    )
    trainer.losses = []
    trainer.train()  # no "already tracked" error: the callback closed its own tracker
    assert callback.tracker is None and not is_tracked(trainer.model)
