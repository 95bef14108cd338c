"""Names of tracked tensors, selection patterns and odd module outputs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tandv_tb.torch import naming, track
from tandv_tb.tracking.selection import Selection
from tests.helpers.torch_models import read_records

T = torch.zeros(1)


@pytest.mark.parametrize(
    "output, names",
    [
        (T, ["m"]),
        ((T, (T, T)), ["m", "m.1", "m.2"]),  # an LSTM's (out, (h, c))
        ((T, None), ["m"]),  # MultiheadAttention without weights
        ((None, T, [T]), ["m.1", "m.2"]),
        ({"logits": T, "aux": (T, T)}, ["m.logits", "m.aux", "m.aux.1"]),
        ((T, {"k": T}), ["m", "m.1.k"]),
        ((T, 3, "text"), ["m"]),
    ],
)
def test_output_tensor_names(output, names):
    assert [name for name, _ in naming.output_tensors(output, "m")] == names


def test_wrappers_add_nothing_to_names():
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU()))
    compiled = torch.compile(model, backend="eager")
    assert [p for p, _ in naming.named_modules(compiled)] == ["", "0", "1", "1.0"]
    assert [n for n, _, _ in naming.named_parameters(compiled)] == ["0.weight", "0.bias"]
    assert naming.root_name(compiled) == "Sequential"


def test_shared_modules_and_parameters_are_named_once():
    lin = nn.Linear(2, 2)
    model = nn.ModuleDict({"a": lin, "b": lin, "c": nn.Linear(2, 2)})
    model["c"].weight = lin.weight  # tied
    assert [p for p, _ in naming.named_modules(model)] == ["", "a", "c"]
    assert [n for n, _, _ in naming.named_parameters(model)] == ["a.weight", "a.bias", "c.bias"]


def test_selection():
    selected = Selection(include=[r"^blocks\.", "head"], exclude="bias$")
    assert selected("blocks.0.fc") and selected("head.weight")
    assert not selected("blocks.0.fc.bias") and not selected("embed")
    assert Selection()("anything")
    with pytest.raises(TypeError, match="include"):
        Selection(include=[3])


class ReturnsParameter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(3, 2))

    def forward(self) -> torch.Tensor:
        return self.table


def test_container_output_names_do_not_clash_with_children(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Sequential(nn.Linear(3, 4), nn.LSTM(4, 4)))
    source = ReturnsParameter()
    with (
        track(model, logdir=str(tmp_path)) as tracker,
        track(source, logdir=str(tmp_path / "p")) as t2,
    ):
        for _ in range(3):
            out, (h, c) = model(torch.randn(2, 3))
            (out.sum() + h.sum() + source().sum()).backward()
            tracker.step()
            t2.step()
        # A hook on a leaf tensor (a parameter returned as an output) lasts one step only.
        assert not source.table._backward_hooks
    records = read_records(str(tmp_path))
    activations = {n for n, t, s in records if t == "Activation" and s == 0}
    # ``0``'s output (out, (h, c)) would be 0, 0.1, 0.2, but ``0.1`` is its child LSTM.
    assert activations == {"0.0", "0.1", "0.1.1", "0.1.2", "0", "0[1]", "0[2]"} | {
        "Sequential",
        "Sequential.1",
        "Sequential.2",
    }
    assert records["0.1.1", "Activation", 0].record == records["0[1]", "Activation", 0].record
    grads = read_records(str(tmp_path / "p"))
    assert [grads["ReturnsParameter", "Gradient", s].record.numel for s in range(3)] == [6, 6, 6]
