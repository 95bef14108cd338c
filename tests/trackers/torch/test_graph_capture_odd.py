"""The PyTorch graph capture of odd modules, and its failures: never a crash, training unchanged."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch
from torch import nn

from tandv_tb import GraphCaptureWarning
from tandv_tb.torch import track
from tandv_tb.torch.graph_recording import Recording
from tests.helpers.graph_training import ResidualMLP, seeded, train
from tests.helpers.model_graphs import edge_pairs, graph_steps, recorded_graph


@dataclasses.dataclass
class Pair:
    left: torch.Tensor
    right: torch.Tensor


class Split(nn.Module):
    def forward(self, x):
        return Pair(x[:, :2] * 2, x[:, 2:] + 1)


class Keep(nn.Module):
    def forward(self, x):
        return x


class Nothing(nn.Module):
    def forward(self, x):
        self.seen = x.shape
        return None


class Mixed(nn.Module):
    def forward(self, x):
        return {"a": torch.cat([x, x], dim=1), "n": 3, "none": None}

    def extra_repr(self):
        raise RuntimeError("a broken extra_repr")


class Odd(nn.Module):
    """Dataclass, dict, ``None`` and unchanged outputs; an in-place addition to a module's
    output; an in-place ReLU module."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 4)
        self.split, self.keep, self.nothing, self.mixed = Split(), Keep(), Nothing(), Mixed()
        self.lin = nn.Linear(4, 4)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        pair = self.split(self.first(x))
        y = self.keep(pair.left)
        self.nothing(y)
        z = self.lin(self.mixed(y)["a"])
        z += torch.cat([pair.right, pair.right], dim=1)
        return self.relu(z)


def test_odd_outputs_in_place_changes_and_other_hooks(tmp_path):
    """Never a crash, training bitwise unchanged; what can be recorded is."""

    def odd() -> Odd:
        torch.manual_seed(0)
        model = Odd()
        # Another library's hooks: one replaces an output, one changes an input.
        model.keep.register_forward_hook(lambda m, a, out: out * 1.0)
        model.lin.register_forward_pre_hook(lambda m, a: (a[0] + 0.0,))
        return model

    with warnings.catch_warnings():
        warnings.simplefilter("error", GraphCaptureWarning)
        assert train(odd(), tmp_path, steps=2) == train(odd(), steps=2)
    graph = recorded_graph(tmp_path)
    specs = {n.id: ([s.shape for s in n.inputs], [s.shape for s in n.outputs]) for n in graph.nodes}
    assert specs == {
        "Odd#0": ([(16, 4)], [(16, 4)]),
        "first#0": ([(16, 4)], [(16, 4)]),
        "split#0": ([(16, 4)], [(16, 2), (16, 2)]),
        "keep#0": ([(16, 2)], [(16, 2)]),
        "nothing#0": ([(16, 2)], []),
        "mixed#0": ([(16, 2)], [(16, 4)]),
        "lin#0": ([(16, 4)], [(16, 4)]),
        "relu#0": ([(16, 4)], [(16, 4)]),
    }
    assert graph.nodes[5].extra["extra_repr"] == ""
    assert edge_pairs(graph) == [
        ("relu#0", "Odd#0"),
        ("first#0", "split#0"),
        ("split#0", "keep#0"),
        ("keep#0", "nothing#0"),
        ("keep#0", "mixed#0"),
        ("mixed#0", "lin#0"),
        ("split#0", "relu#0"),  # the in-place addition to lin's output
        ("lin#0", "relu#0"),
    ]


def test_without_autograd_edges_follow_tensors_and_views_of_them(tmp_path):
    """Under ``torch.no_grad`` a tensor a call returned is followed as it is passed on, or
    viewed; not through functional code (the residual addition)."""
    model = ResidualMLP()
    with track(model, logdir=str(tmp_path)) as tracker, torch.no_grad():
        h = model.inp(torch.randn(2, 4))
        model.head(h.view(2, 8)[:, :8])
        model(torch.randn(2, 4))
        tracker.step()
    graph = recorded_graph(tmp_path)
    assert [n.id for n in graph.nodes[:2]] == ["inp#0", "head#0"]
    assert graph.nodes[2].id == "ResidualMLP#0" and graph.nodes[2].parent is None
    assert ("inp#0", "head#0") in edge_pairs(graph)  # through a view of a view
    assert ("inp#1", "blocks.0.0#0") in edge_pairs(graph)
    assert ("inp#1", "blocks.1#0") not in edge_pairs(graph)  # after h + block(h)


def test_a_model_of_one_module_is_one_node(tmp_path):
    train(nn.Linear(4, 2), tmp_path)
    graph = recorded_graph(tmp_path)
    assert [(n.id, n.parent) for n in graph.nodes] == [("Linear#0", None)]
    assert graph.edges == ()


def test_a_model_without_submodules_is_one_node(tmp_path):
    class Functional(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(4, 2))

        def forward(self, x):
            return torch.tanh(x @ self.w)

    train(Functional(), tmp_path)
    (node,) = recorded_graph(tmp_path).nodes
    assert node.id == "Functional#0"
    assert node.extra["parameters"] == [{"name": "w", "shape": [4, 2], "dtype": "float32"}]


def test_a_failing_capture_warns_once_and_training_goes_on(tmp_path, monkeypatch):
    def broken(self, module, args, kwargs, take=True):
        raise RuntimeError("injected")

    monkeypatch.setattr(Recording, "begin", broken)
    with pytest.warns(GraphCaptureWarning, match="injected") as caught:
        losses = train(seeded(ResidualMLP), tmp_path, steps=3)
    assert sum(issubclass(w.category, GraphCaptureWarning) for w in caught) == 1
    assert losses == train(seeded(ResidualMLP), steps=3)
    assert graph_steps(tmp_path) == {}
