"""The demo's runs (``demo/make_demo.py``), trained for fewer steps: enough for its story
(float8_e4m3fn overflows in ``torch/lr_2e-1`` from step 5, its loss spikes after step 60,
the two torch runs part), about half a minute on two cores."""

from __future__ import annotations

from pathlib import Path

from demo import make_demo

STEPS, EVERY = 75, 5
TORCH_RUNS = ("torch/lr_2e-1", "torch/lr_3e-3")


def short_demo(root: Path) -> Path:
    """The demo's four runs under ``root / "runs"``."""
    logdir = root / "runs"
    make_demo.main(["--logdir", str(logdir), "--steps", str(STEPS), "--every", str(EVERY)])
    return logdir
