"""``track_inputs=True``: module inputs (``Input``) and their gradients (``Input_Gradient``)."""

from __future__ import annotations

import dataclasses
import types
import warnings

import numpy as np
import torch
from torch import nn

from tandv_tb.torch import UntrackableTensorWarning, track
from tests.helpers.reference import assert_matches
from tests.helpers.torch_models import GPT, Block, gpt_loss, read_records


def matches_reference(stored, tensor: torch.Tensor) -> None:
    """The stored record equals the float64 numpy reference of ``tensor``."""
    values = tensor.detach().numpy()
    assert_matches(types.SimpleNamespace(to_record=lambda: stored.record), values, (), 1e-5)


def test_inputs_and_their_gradients_match_autograd_grad(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), Block(), nn.Linear(8, 2))
    x = torch.randn(16, 8, requires_grad=True)
    # The inputs of model[1] and model[2], and the loss's gradients, by hand, untracked.
    hidden = model[0](x)
    block_out = model[1](hidden)
    loss = model[2](block_out).square().mean()
    wanted = torch.autograd.grad(loss, [x, hidden, block_out])
    with track(model, logdir=str(tmp_path), track_inputs=True, track_weights=False) as tracker:
        model(x).square().mean().backward()
        tracker.step()
    records = read_records(str(tmp_path))
    matches_reference(records["0", "Input", 0], x)
    matches_reference(records["1", "Input", 0], hidden)
    matches_reference(records["2", "Input", 0], block_out)
    matches_reference(records["0", "Input_Gradient", 0], wanted[0])
    # The block's in-place residual add changes nothing: the input as given, and the
    # gradient w.r.t. it over all its uses.
    matches_reference(records["1", "Input_Gradient", 0], wanted[1])
    matches_reference(records["2", "Input_Gradient", 0], wanted[2])
    # Inputs sit where the module starts: before its children's outputs.
    assert records["1", "Input", 0].order < records["1.fc1", "Activation", 0].order
    assert records["1", "Input", 0].module_type == "Block"


def test_same_tensor_given_twice_and_keyword_and_nested_inputs(tmp_path):
    class Pair(nn.Module):
        def forward(self, a, b, scale=None, extra=None, config=None):
            return a * b * scale + extra["bias"] + extra["more"][0]

    @dataclasses.dataclass
    class Config:
        depth: int

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.pair = Pair()

        def forward(self, x):
            h = self.fc(x)
            extra = {"bias": torch.ones(4), "more": [torch.full((4,), 2.0), 3]}
            return self.pair(h, h, scale=torch.tensor(0.5), extra=extra, config=Config(2))

    torch.manual_seed(0)
    model = Model()
    x = torch.randn(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UntrackableTensorWarning)  # non-tensors: silent
        h = model.fc(x)
        extra = {"bias": torch.ones(4), "more": [torch.ones(4)]}
        (grad_h,) = torch.autograd.grad(model.pair(h, h, torch.tensor(0.5), extra).sum(), h)
        with track(model, logdir=str(tmp_path), track_inputs=True) as tracker:
            model(x).sum().backward()
            tracker.step()
    records = read_records(str(tmp_path))
    names = {n for n, t, s in records if t == "Input"}
    assert names == {"Model", "fc", "pair", "pair.1", "pair.scale", "pair.extra.bias"} | {
        "pair.extra.more"
    }
    # The same tensor given twice: two inputs, each the gradient w.r.t. that tensor.
    for name in ("pair", "pair.1"):
        matches_reference(records[name, "Input", 0], h)
        matches_reference(records[name, "Input_Gradient", 0], grad_h)
    assert ("pair.scale", "Input_Gradient", 0) not in records  # needs no gradient


def test_integer_inputs_are_skipped_silently_and_losses_stay_bitwise_equal(tmp_path):
    def losses(tracked: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = GPT()
        optimizer = torch.optim.AdamW(model.parameters())
        tracker = track(model, logdir=str(tmp_path), optimizer=optimizer, track_inputs=True)
        if not tracked:
            tracker.close()
        out = []
        for step in range(2):
            tokens = torch.randint(0, 64, (4, 17), generator=torch.Generator().manual_seed(step))
            loss = gpt_loss(model, tokens)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if tracked:
                tracker.step()
            out.append(loss.detach())
        tracker.close()
        return out

    with warnings.catch_warnings():
        warnings.simplefilter("error", UntrackableTensorWarning)
        tracked = losses(True)
    assert all(torch.equal(a, b) for a, b in zip(tracked, losses(False)))
    records = read_records(str(tmp_path))
    assert ("embed", "Input", 0) not in records  # token ids
    assert ("blocks.0.attn", "Input", 0) in records
    assert ("blocks.0.attn.2", "Input", 0) in records  # attention's third positional input
    assert ("blocks.0.attn.attn_mask", "Input", 0) not in records  # a bool mask
    assert np.isfinite(records["head", "Input_Gradient", 1].record.statistics["rm2"])


def test_inputs_are_off_by_default(tmp_path):
    model = nn.Linear(2, 2)
    with track(model, logdir=str(tmp_path)) as tracker:
        model(torch.randn(1, 2)).sum().backward()
        tracker.step()
    assert not {t for _, t, _ in read_records(str(tmp_path))} & {"Input", "Input_Gradient"}
