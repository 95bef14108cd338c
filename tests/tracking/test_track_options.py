"""Both ``track`` functions check their options in one place (``TrackOptions``): a bad
value raises an error naming the keyword before anything is hooked or written, and the
defaults of the two signatures agree where the keywords are shared."""

from __future__ import annotations

import dataclasses
import inspect

import jax.numpy as jnp
import pytest
import torch

import tandv_tb.jax
import tandv_tb.torch
from tandv_tb.torch.options import TorchOptions
from tandv_tb.tracking.options import TrackOptions

BAD = [
    ({"every": 0}, ValueError, "every"),
    ({"every": True}, ValueError, "every"),
    ({"every": 2.0}, ValueError, "every"),
    ({"init_step": -1}, ValueError, "init_step"),
    ({"init_step": "3"}, ValueError, "init_step"),
    ({"watch_nonfinite": 1}, TypeError, "watch_nonfinite"),
    ({"include": "("}, ValueError, "include"),
    ({"exclude": [3]}, TypeError, "exclude"),
    ({"formats": ("float8_e9",)}, ValueError, "formats"),
    ({"formats": ("nvfp4:rceil",)}, ValueError, "formats"),
]


@pytest.mark.parametrize(("keywords", "error", "named"), BAD)
def test_bad_torch_options_name_the_keyword_and_write_nothing(tmp_path, keywords, error, named):
    logdir = tmp_path / "run"
    model = torch.nn.Linear(2, 2)
    with pytest.raises(error, match=named):
        tandv_tb.torch.track(model, logdir=logdir, **keywords)
    assert not logdir.exists()
    assert not tandv_tb.torch.is_tracked(model)


@pytest.mark.parametrize(("keywords", "error", "named"), BAD)
def test_bad_jax_options_name_the_keyword_and_write_nothing(tmp_path, keywords, error, named):
    logdir = tmp_path / "run"
    with pytest.raises(error, match=named):
        tandv_tb.jax.track({"w": jnp.ones(2)}, logdir=logdir, **keywords)
    assert not logdir.exists()


def test_a_torch_optimizer_that_is_not_one_raises_naming_the_keyword(tmp_path):
    with pytest.raises(TypeError, match="optimizer must be a torch.optim.Optimizer"):
        tandv_tb.torch.track(torch.nn.Linear(2, 2), logdir=tmp_path, optimizer="adam")


def test_options_are_the_signatures_keywords_and_frozen(tmp_path):
    """Every keyword of each ``track`` is a field of its options object and back, the
    shared keywords have the same defaults, and options cannot change under a tracker."""
    torch_signature = inspect.signature(tandv_tb.torch.track).parameters
    jax_signature = inspect.signature(tandv_tb.jax.track).parameters
    fields = {f.name for f in dataclasses.fields(TorchOptions) if f.init}
    assert fields == set(torch_signature) - {"module"}
    shared = {f.name for f in dataclasses.fields(TrackOptions) if f.init}
    assert shared == set(jax_signature) - {"model_state", "optimizer_state"}
    for name in shared:
        assert torch_signature[name].default == jax_signature[name].default, name
    options = TrackOptions(None, None, 1, None, None, True, False, (), 0, True, "record")
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.every = 5
