"""Shared pieces of the model-parallel tests (tensor, pipeline and 2-D parallelism; no tests
here): the small models, their training, what each rank saw, and the checks of a parallel
run's records against the same model trained on one process.

Losses are sums over the global batch divided by its size, so that every rank's gradients
of activations are those of the one-process run, whatever share of the batch it holds.
Weights and inputs lie on coarse grids (sixteenths, halves): the first layers' sums are
then exact in any order, so that a parallel run holds the very values of the one-process
run there (and its counts are compared exactly), until rounding sets in.
"""

from __future__ import annotations

import contextlib
import functools
from collections import OrderedDict

import numpy as np
import torch
from torch import nn

from tandv_tb.torch.naming import root_name
from tests.helpers.torch_models import assert_same, expected, read_records

WIDTH, HIDDEN, ROWS, STEPS = 8, 16, 8, 2


class Block(nn.Module):
    """``fc1`` (column-parallel), ``act``, ``fc2`` (row-parallel)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(WIDTH, HIDDEN)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(HIDDEN, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class TwoBlocks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(Block(), Block())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


def _on_grid(model: nn.Module) -> nn.Module:
    """``model`` with its weights rounded to sixteenths."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.round(parameter * 16) / 16)
    return model


def two_blocks() -> TwoBlocks:
    torch.manual_seed(0)
    return _on_grid(TwoBlocks())


def four_layers() -> nn.Sequential:
    """The 4-layer MLP the pipeline tests cut in two stages (modules 0-3, 4-6)."""
    torch.manual_seed(0)
    return _on_grid(nn.Sequential(
        nn.Linear(WIDTH, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
        nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, WIDTH),
    ))  # fmt: skip


STAGES = (("0", "1", "2", "3"), ("4", "5", "6"))


def stage_module(model: nn.Sequential, stage: int) -> nn.Sequential:
    """Stage ``stage`` of ``four_layers()``: its modules under their names in the model."""
    return nn.Sequential(OrderedDict((name, model._modules[name]) for name in STAGES[stage]))


#: The outputs ``tp_plan`` splits along their last dimension (the others are replicas).
SHARDED = ("fc1", "act")


def tp_plan() -> dict:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan = {}
    for i in range(2):
        plan[f"blocks.{i}.fc1"] = ColwiseParallel()
        plan[f"blocks.{i}.fc2"] = RowwiseParallel()
    return plan


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The global batch of ``step``: inputs and targets, ``ROWS`` rows."""
    generator = torch.Generator().manual_seed(1000 + step)
    x, y = (torch.randn(ROWS, WIDTH, generator=generator) for _ in "xy")
    return torch.round(x * 2) / 2, torch.round(y * 2) / 2


def loss_of(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """A share of the global batch's loss: its squared errors over the global batch size."""
    return (output - target).square().sum() / (ROWS * WIDTH)


def capture(root: nn.Module, seen: dict, skip_root: bool = False) -> None:
    """Keep every module's output and its gradient, each call (``seen[type, name]``),
    named as the tracker names them."""

    def on_output(name, module, args, output):
        seen.setdefault(("Activation", name), []).append(output.detach().clone())
        output.register_hook(lambda g: seen.setdefault(("Gradient", name), []).append(g.clone()))

    for path, module in root.named_modules():
        if path or not skip_root:
            module.register_forward_hook(functools.partial(on_output, path or root_name(root)))


def full(tensor: torch.Tensor) -> torch.Tensor:
    """A copy of a DTensor's full tensor (a collective), or of any other tensor."""
    return (tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor).detach().clone()


def parameters_seen(model: nn.Module, optimizer: torch.optim.Optimizer, grads: dict) -> dict:
    """The full weights, the weight gradients (``grads``, taken before the optimizer
    stepped) and the optimizer state, as ``seen`` keeps tensors."""
    seen = {("Weight_Gradient", n): [g] for n, g in grads.items()}
    for name, p in model.named_parameters():
        seen["Weight", name] = [full(p)]
        for key, value in optimizer.state[p].items():
            if value.dim() > 0:
                seen[f"Optimiser_State.{key}", name] = [full(value)]
    return seen


def gradients(model: nn.Module) -> dict:
    return {n: full(p.grad) for n, p in model.named_parameters() if p.grad is not None}


def train(
    model: nn.Module, optimizer, tracker, step_fn, skip_root: bool = False
) -> tuple[list, list]:
    """``STEPS`` steps of ``step_fn(x, y)`` (forward and backward; the loss or None), each
    tracked by ``tracker`` (None: untracked): the losses, and per step what the model saw
    (``capture``) and its parameters' tensors."""
    seen: dict = {}
    capture(model, seen, skip_root)
    losses, steps = [], []
    with contextlib.nullcontext() if tracker is None else tracker:
        for step in range(STEPS):
            seen.clear()
            optimizer.zero_grad()
            loss = step_fn(*batch(step))
            grads = gradients(model)
            optimizer.step()
            if tracker is not None:
                tracker.step()
            if loss is not None:
                losses.append(loss.detach().clone())
            steps.append({**seen, **parameters_seen(model, optimizer, grads)})
    return losses, steps


def train_one_process(logdir: str, model: nn.Module, optimizer, track) -> list[dict]:
    """Train ``model`` on the global batches, tracked into ``logdir``: what it saw at
    each step."""

    def step_fn(x, y):
        loss = loss_of(model(x), y)
        loss.backward()
        return loss

    return train(model, optimizer, track(model, logdir=logdir, optimizer=optimizer), step_fn)[1]


def check_against_one_process(parallel: str, one: str, wholes: list, one_seen: list) -> int:
    """The parallel run's records (``parallel``) against the same model's on one process
    (``one``): the same names and tensor types at every step, the same ``numel``; each
    record exactly that of the whole tensor the ranks held (``wholes``, per step), and,
    against the one-process record, exact counts where the data are the same (else
    ``rm2`` within 1e-4). Returns how many tensors held the same data."""
    mine, theirs = read_records(parallel), read_records(one)
    assert sorted(mine) == sorted(theirs)
    same = 0
    for step, (held, reference_held) in enumerate(zip(wholes, one_seen)):
        assert sorted(held) == sorted(reference_held)
        for (tensor_type, name), whole in held.items():
            stored = mine[name, tensor_type, step].record
            reference = theirs[name, tensor_type, step].record
            where = f"{tensor_type} {name!r} at step {step}"
            assert stored.numel == reference.numel, where
            _same(stored, expected(whole), f"{where}, against the tensor held")
            if torch.equal(_rows(whole), _rows(reference_held[tensor_type, name])):
                same += 1
                _same(stored, reference, f"{where}, against the one-process record")
            else:
                rm2 = reference.statistics["rm2"]
                np.testing.assert_allclose(stored.statistics["rm2"], rm2, rtol=1e-4)
    return same


def _rows(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Several calls' tensors as the rows of one (microbatches make up a batch)."""
    return torch.cat([t.reshape(-1, t.shape[-1]) for t in tensors])


def _same(got, want, where: str) -> None:
    try:
        assert_same(got, want)
    except AssertionError as error:
        raise AssertionError(f"{where}: {error}") from None


def assert_same_training(tracked: dict, untracked: dict, run: str) -> None:
    """Two runs of ``train`` lost and saw the very same, bit for bit."""
    assert all(map(torch.equal, tracked["losses"], untracked["losses"])), run
    for held, untracked_held in zip(tracked["steps"], untracked["steps"], strict=True):
        for key, tensors in held.items():
            assert all(map(torch.equal, tensors, untracked_held[key])), (run, key)
