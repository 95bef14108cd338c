"""What tracking adds to a training step's dispatches, on a small GPT (4 blocks, AdamW,
every tensor type, two element formats and nvfp4): Triton launches plus torch operations
(``launch_counts``), for the kernel ``TANDV_TB_KERNEL`` names (set by the caller).

Only what tracking adds is counted: the training step is run in two phases, the forward
and backward (where the hooks take the activations and gradients) and the optimizer's
step with ``tracker.step()`` (where the weight gradients, weights and optimizer state are
read, and the step's results brought to the host), and each phase's count in a plain
step of the same model (no tracker; AdamW past its first step, whose dispatches are the
same every step) is subtracted from the tracked or watched step's. Used by
tests/trackers/torch/test_torch_dispatches.py and bench/launches.py."""

from __future__ import annotations

import dataclasses
import tempfile

import torch

from tandv_tb.torch import track
from tests.helpers.launch_counts import Counts, counting
from tests.helpers.torch_models import GPT, gpt_loss
from tests.helpers.tracker_records import read_records

FORMATS = ("float8_e4m3fn", "float8_e5m2", "nvfp4")
#: The GPT's shape: 4 blocks, small enough for Triton's interpreter.
SHAPE = {"vocab": 64, "width": 32, "heads": 4, "hidden": 64, "depth": 4, "length": 16}


@dataclasses.dataclass
class Phases:
    """A step's dispatches in its two phases."""

    hooks: Counts  # forward and backward
    step: Counts  # optimizer.step() and tracker.step()


@dataclasses.dataclass
class StepDispatches:
    """What tracking added, per phase, to a tracked step and to a watched (untracked) one,
    and the tensors each took."""

    tracked_tensors: int  # records written at the tracked step
    hooked_tensors: int  # of which activations and gradients: what the hooks hand over
    plain: Phases
    tracked: Phases
    watched: Phases

    def added(self, phases: Phases, phase: str) -> int:
        """Launches and torch operations tracking added to ``phase`` of ``phases``."""
        return getattr(phases, phase).total - getattr(self.plain, phase).total

    @property
    def per_tracked_tensor(self) -> float:
        added = self.added(self.tracked, "hooks") + self.added(self.tracked, "step")
        return added / self.tracked_tensors

    @property
    def per_hooked_tensor(self) -> float:
        """On a watched step, per activation and gradient the hooks handed over."""
        return self.added(self.watched, "hooks") / self.hooked_tensors

    @property
    def step_reads(self) -> int:
        """On a watched step, for everything read at ``optimizer.step()`` and ``step()``."""
        return self.added(self.watched, "step")


def gpt_step_dispatches(batch: int = 2, device: str = "cpu") -> StepDispatches:
    """Plain steps, then under ``track(every=3)`` a tracked step (step 0), an untracked
    one (step 1, which sizes the watch's buffers) and a watched one (step 2), counted."""
    torch.manual_seed(0)
    model = GPT(**SHAPE).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, SHAPE["vocab"], (batch, SHAPE["length"] + 1), device=device)

    def forward_backward() -> None:
        optimizer.zero_grad()
        gpt_loss(model, tokens).backward()

    def step(tracker=None) -> Phases:
        with counting() as hooks:
            forward_backward()
        with counting() as stepped:
            optimizer.step()
            if tracker is not None:
                tracker.step()
        return Phases(hooks, stepped)

    for _ in range(2):  # AdamW's first step makes its state
        step()
    plain = step()
    with tempfile.TemporaryDirectory() as logdir:
        with track(model, logdir=logdir, optimizer=optimizer, every=3, formats=FORMATS) as tracker:
            tracked = step(tracker)
            step(tracker)
            watched = step(tracker)
        records = [key for key in read_records(logdir) if key[2] == 0]
    hooked = [key for key in records if key[1] in ("Activation", "Gradient")]
    return StepDispatches(len(records), len(hooked), plain, tracked, watched)
