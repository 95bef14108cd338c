"""What this torch can do for a compiled model, found by feature detection
(``tandv_tb.torch.features``): from torch 2.13 the compiled modules' activations and
gradients are recorded (tests/trackers/torch/test_torch_compile.py); before, compiled code
hands nothing over, training is unchanged, the rest is recorded, and one
``NewerReleaseWarning`` names what is missing and the torch that brings it.

Each half runs, unpatched, where the installed torch is that side of the line (`make compat`
runs this file on the floor and the newest torch).
"""

from __future__ import annotations

import warnings

import pytest
import torch

from tandv_tb import versions
from tandv_tb.torch import compiled, features
from tests.helpers.compiled_training import (
    NanoGPT,
    assert_same_training,
    one_thread,
    tags,
    train_nanogpt,
)
from tests.helpers.torch_models import ADAM_TYPES


def _compiled_nanogpt() -> torch.nn.Module:
    torch.compiler.reset()
    torch.manual_seed(0)
    return torch.compile(NanoGPT())


def _train(tmp_path, monkeypatch):
    """Two tracked runs of a compiled nanoGPT and an untracked one, with the warnings the
    tracked runs gave (what was said before in this process, said anew)."""
    monkeypatch.setattr(versions, "_said", set())
    with one_thread(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = train_nanogpt(_compiled_nanogpt(), 2, logdir=str(tmp_path / "a"), every=1)
        train_nanogpt(_compiled_nanogpt(), 2, logdir=str(tmp_path / "b"), every=1)
    with one_thread():
        want = train_nanogpt(_compiled_nanogpt(), 2)
    said = [str(w.message) for w in caught if w.category is versions.NewerReleaseWarning]
    return got, want, said


@pytest.mark.skipif(not compiled.HOOKS_IN_GRAPH, reason="this torch predates compiled tracking")
def test_a_torch_with_compiled_tracking_says_nothing_is_missing(tmp_path, monkeypatch):
    got, want, said = _train(tmp_path, monkeypatch)
    assert_same_training(got, want)
    assert said == []
    assert {t for _, t in tags(tmp_path / "a")} >= ADAM_TYPES


@pytest.mark.skipif(compiled.HOOKS_IN_GRAPH, reason="this torch records compiled modules")
def test_an_older_torch_says_once_what_compiled_tracking_lacks_and_trains_unchanged(
    tmp_path, monkeypatch
):
    got, want, said = _train(tmp_path, monkeypatch)
    assert_same_training(got, want)
    assert got.breaks == 0
    assert len(said) == 1, said
    assert f"needs torch {features.COMPILED_TRACKING} or later" in said[0]
    assert f"torch {torch.__version__} is installed" in said[0]
    recorded = tags(tmp_path / "a")
    assert {t for _, t in recorded} >= ADAM_TYPES - {"Activation", "Gradient"}
    assert not {name for name, t in recorded if t in ("Activation", "Gradient") and "." in name}
