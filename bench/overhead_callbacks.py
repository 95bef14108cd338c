"""Overhead of ``tandv_tb.lightning.NumericsCallback`` (a benchmark, not a test).

The reference workload of ``overhead_torch.py`` (GPT-style decoder, sequence 128, batch
16, AdamW, CPU float32, 2 threads) trained by a Lightning ``Trainer`` (no logger, no
checkpoints, no progress bar): plain, with ``NumericsCallback()`` (every step) and with
``NumericsCallback(every=10)``; beside them the same model in a hand-written loop, plain
and with ``track`` every step, so that the callback's ratio can be set beside the
tracker's own. Step times are taken between consecutive ``on_train_batch_end`` calls (after
the callback's), the first 3 steps of a fit left out; ``every=10`` is the mean over whole
windows of 10 steps. Variants interleaved in rounds; medians printed as ratios to plain.

Run: ``.venv/bin/python bench/overhead_callbacks.py [--rounds R]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings

import torch

sys.path.insert(0, __file__.rsplit("/bench/", 1)[0])

import lightning.pytorch as L  # noqa: E402

from bench.overhead_torch import BATCH, LENGTH, VOCAB, make_model, timed, train_step  # noqa: E402
from tandv_tb.lightning import NumericsCallback  # noqa: E402
from tandv_tb.torch import track  # noqa: E402
from tests.helpers.torch_models import gpt_loss  # noqa: E402

WARMUP = 3


class GPTModule(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.model, _ = make_model()

    def training_step(self, tokens, batch_idx):
        return gpt_loss(self.model, tokens)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class StepClock(L.Callback):
    """Seconds between consecutive ``on_train_batch_end`` calls."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._last: float | None = None

    def on_train_batch_end(self, *args) -> None:
        now = time.perf_counter()
        if self._last is not None:
            self.times.append(now - self._last)
        self._last = now


def lightning_steps(steps: int, logdir: str, **options) -> list[float]:
    """Per-step seconds of a Lightning fit (with ``NumericsCallback(**options)`` unless
    ``options`` is ``None``)."""
    tokens = torch.randint(0, VOCAB, (BATCH * (steps + WARMUP + 1), LENGTH + 1))
    clock = StepClock()
    callbacks = [clock] if options.get("plain") else [NumericsCallback(**options), clock]
    trainer = L.Trainer(
        max_steps=steps + WARMUP + 1,
        accelerator="cpu",
        logger=False,
        default_root_dir=logdir,
        callbacks=callbacks,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(GPTModule(), torch.utils.data.DataLoader(tokens, batch_size=BATCH))
    return clock.times[WARMUP:]


def overhead(rounds: int, steps: int) -> dict[str, float]:
    times: dict[str, list[float]] = {}

    def add(name: str, values: list[float]) -> None:
        times.setdefault(name, []).extend(values)

    model, optimizer = make_model()
    with tempfile.TemporaryDirectory() as logdir:
        for round_ in range(rounds):
            add("Lightning plain", lightning_steps(steps, logdir, plain=True))
            add("Lightning + NumericsCallback()", lightning_steps(steps, f"{logdir}/a{round_}"))
            windows = lightning_steps(steps, f"{logdir}/b{round_}", every=10)
            add(
                "Lightning + NumericsCallback(every=10)",
                [statistics.mean(windows[i : i + 10]) for i in range(0, len(windows) - 9, 10)],
            )
            add("hand loop plain", timed(lambda: train_step(model, optimizer), steps))
            with track(model, logdir=f"{logdir}/t{round_}", optimizer=optimizer) as tracker:
                add(
                    "hand loop + track()",
                    timed(lambda: (train_step(model, optimizer), tracker.step()), steps),
                )
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per fit")
    args = parser.parse_args()
    torch.set_num_threads(2)
    warnings.filterwarnings("ignore")
    print(f"torch {torch.__version__}, lightning {L.__version__}, {args.rounds} rounds")
    results = overhead(args.rounds, args.steps)
    for name, seconds in results.items():
        base = results["hand loop plain" if name.startswith("hand") else "Lightning plain"]
        print(f"{name:40s} {seconds * 1000:9.1f} ms  {seconds / base:6.2f}x")


if __name__ == "__main__":
    main()
