"""``track`` under ``torch.compile``: attach, the nonfinite watch, buffers rewritten in place."""

from __future__ import annotations

import collections

import pytest
import torch
from torch import nn

from tandv_tb.event_files.nonfinite import NonfiniteEntry, read_nonfinite
from tandv_tb.torch import attach, track
from tests.helpers.compiled_training import steps
from tests.helpers.torch_models import assert_same, read_records

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.fc2 = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = attach(torch.tanh(self.fc1(x)) * 3.0, "scaled", self)
        return self.fc2(h)


def test_attach_inside_a_fullgraph_compiled_model(tmp_path):
    records = {}
    for mode in ("eager", "compiled"):
        torch.compiler.reset()
        torch.manual_seed(0)
        model = Scaled()
        if mode == "compiled":
            model = torch.compile(model, fullgraph=True, backend="aot_eager")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        with track(model, logdir=str(tmp_path / mode), optimizer=optimizer) as tracker:
            for step in range(2):
                x = torch.randn(16, 8, generator=torch.Generator().manual_seed(step))
                model(x).square().mean().backward()
                optimizer.step()
                optimizer.zero_grad()
                tracker.step()
        records[mode] = read_records(str(tmp_path / mode))
    assert records["compiled"].keys() == records["eager"].keys()
    for kind in ("Activation", "Gradient"):
        for step in (0, 1):
            got = records["compiled"]["Scaled.scaled", kind, step].record
            assert_same(got, records["eager"]["Scaled.scaled", kind, step].record, rtol=1e-5)


class Poisoned(nn.Module):
    """A linear whose output gets a buffer added: NaN when the test writes NaN into it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 6)
        self.poison = nn.Buffer(torch.zeros(()))
        self.fc2 = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)) + self.poison)


def test_the_watch_inside_the_compiled_graph_names_the_first_nan(tmp_path):
    torch.compiler.reset()
    torch.manual_seed(0)
    model = Poisoned()
    compiled = torch.compile(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    with track(compiled, logdir=str(tmp_path), optimizer=optimizer, every=5) as tracker:
        for step in range(8):
            model.poison.fill_(float("nan") if step == 3 else 0.0)
            compiled(torch.randn(4, 6)).square().mean().backward()
            optimizer.step()
            optimizer.zero_grad()
            tracker.step()
    found = read_nonfinite(tmp_path)
    assert [f.step for f in found][0] == 3
    assert found[0].entries[0] == NonfiniteEntry("Gradient", "fc2", 8, 0, 0) or found[0].entries[
        0
    ] == NonfiniteEntry("Activation", "fc2", 8, 0, 0)
    assert steps(tmp_path) == [0, 4, 5]  # the step after the NaN is tracked


class Spiked(Poisoned):
    """``Poisoned`` with the buffer added to the model's output: +Inf there, and +Inf,
    -Inf and NaN in the gradients when the test writes +Inf into it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x))) + self.poison


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_compiled_watch_finds_what_the_eager_watch_finds(tmp_path, dtype):
    """The watch inside the compiled graph counts what the eager watch counts: the
    entries of a step poisoned with +Inf (NaN, +Inf and -Inf downstream) are equal."""
    found = {}
    for mode in ("eager", "compiled"):
        torch.compiler.reset()
        torch.manual_seed(0)
        model = Spiked().to(dtype)
        run = torch.compile(model) if mode == "compiled" else model
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
        generator = torch.Generator().manual_seed(0)
        with track(run, logdir=str(tmp_path / mode), optimizer=optimizer, every=100) as tracker:
            for step in range(3):
                model.poison.fill_(float("inf") if step == 2 else 0.0)
                x = torch.randn(4, 6, generator=generator).to(dtype)
                run(x).float().square().mean().backward()
                optimizer.step()
                optimizer.zero_grad()
                tracker.step()
        found[mode] = read_nonfinite(tmp_path / mode)
    (eager,), (compiled,) = found["eager"], found["compiled"]
    assert (eager.run, eager.step) == (compiled.run, compiled.step) == (".", 2)
    assert any(e.posinf for e in eager.entries) and any(e.neginf for e in eager.entries)
    assert {"Activation", "Gradient", "Weight_Gradient"} <= {e.tensor_type for e in eager.entries}
    # The root's output is the last module's output too: eagerly both gradient hooks sit
    # on one tensor, compiled the root's sits after the graph, so it is seen first.
    assert collections.Counter(compiled.entries) == collections.Counter(eager.entries)


def test_a_buffer_inductor_rewrites_in_place_is_recorded_afresh(tmp_path):
    """Inductor writes ``fc2(h) + poison`` into ``fc2(h)``'s buffer, whose tensor object
    and version counter stay the same: the model's output is still recorded as itself,
    not as the statistics of ``fc2``'s output taken before."""
    records = {}
    for mode in ("eager", "compiled"):
        torch.compiler.reset()
        torch.manual_seed(0)
        model = Spiked()
        model.poison.fill_(5.0)
        run = torch.compile(model) if mode == "compiled" else model
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
        with track(run, logdir=str(tmp_path / mode), optimizer=optimizer) as tracker:
            run(torch.randn(4, 6, generator=torch.Generator().manual_seed(0))).sum().backward()
            optimizer.step()
            tracker.step()
        records[mode] = read_records(str(tmp_path / mode))
    for name in ("fc2", "Spiked"):
        got = records["compiled"][name, "Activation", 0].record
        assert_same(got, records["eager"][name, "Activation", 0].record, rtol=1e-5)
