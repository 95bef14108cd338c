"""The graph the PyTorch tracker records of compiled models: the eager graph, no graph break."""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch
from torch import nn

from tandv_tb import GraphCaptureWarning
from tandv_tb.torch import track
from tests.helpers.compiled_training import NanoGPT, assert_same_training, train_nanogpt
from tests.helpers.model_graphs import edge_pairs, graph_steps, recorded_graph


def test_a_compiled_model_records_the_eager_graph_without_a_graph_break(tmp_path):
    """``torch.compile(model)`` given to ``track`` and ``model.compile()``: the eager
    model's graph, no graph break, training bitwise as untracked (aot_eager: dynamo and
    AOTAutograd as inductor runs them, without inductor's slow compile)."""
    torch.manual_seed(0)
    train_nanogpt(NanoGPT(), 1, logdir=str(tmp_path / "eager"))
    eager = recorded_graph(tmp_path / "eager")
    assert len(eager.nodes) == 25 and len(eager.edges) == 36

    def compiled(how: str) -> nn.Module:
        torch.compiler.reset()
        torch.manual_seed(0)
        if how == "wrapped":
            return torch.compile(NanoGPT(), backend="aot_eager")
        model = NanoGPT()
        model.compile(backend="aot_eager")
        return model

    for how in ("wrapped", "method"):
        plain = train_nanogpt(compiled(how), 2)
        tracked = train_nanogpt(compiled(how), 2, logdir=str(tmp_path / how))
        assert_same_training(tracked, plain)
        assert tracked.breaks == 0
        assert recorded_graph(tmp_path / how) == eager, how


def test_a_compiled_wrapper_track_was_not_given_says_its_graph_is_not_recorded(tmp_path):
    torch.compiler.reset()
    model = NanoGPT()
    compiled = torch.compile(model, backend="aot_eager")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    tokens = torch.randint(0, 64, (2, 9))
    with (
        pytest.warns(GraphCaptureWarning, match="give track\\(\\) the compiled module"),
        track(model, logdir=str(tmp_path), optimizer=optimizer) as tracker,
    ):
        _, loss = compiled(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        optimizer.step()
        tracker.step()
    assert graph_steps(tmp_path) == {}


class Parts(nn.Module):
    """A model whose parts the training step calls itself, as a Lightning
    ``training_step`` calls ``self.net``."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 8)
        self.body = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
        self.head = nn.Linear(8, 2)


def test_a_compiled_part_the_step_calls_itself_records_the_eager_graph(tmp_path):
    """``model.body = torch.compile(model.body)`` called by the step between eager parts:
    its calls are replayed into the graph after it, and feed the part after it, as eager;
    training is bitwise as untracked."""

    def run(compiled: bool, logdir=None) -> list[torch.Tensor]:
        torch.compiler.reset()
        torch.manual_seed(0)
        model = Parts()
        if compiled:
            model.body = torch.compile(model.body, backend="aot_eager")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(3, 4)
        losses = []
        tracking = track(model, logdir=str(logdir), optimizer=optimizer) if logdir else None
        with tracking or contextlib.nullcontext():
            for _ in range(2):
                loss = model.head(model.body(model.embed(x))).square().mean()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                losses.append(loss.detach())
                if tracking is not None:
                    tracking.step()
        return losses

    run(False, tmp_path / "eager")
    eager = recorded_graph(tmp_path / "eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error", GraphCaptureWarning)
        tracked = run(True, tmp_path / "compiled")
    assert recorded_graph(tmp_path / "compiled") == eager
    assert [n.id for n in eager.nodes] == ["embed#0", "body#0", "body.0#0", "body.1#0", "head#0"]
    assert {("embed#0", "body#0"), ("body.1#0", "head#0")} <= set(edge_pairs(eager))
    assert all(torch.equal(a, b) for a, b in zip(tracked, run(True), strict=True))
