"""The PyTorch watch on tensors that are not contiguous: a permuted one is read in memory
order by the bit-pattern check, a sliced or broadcast one is summed; both count exactly
and report only NaN/Inf."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from tandv_tb.event_files.nonfinite import NonfiniteEntry, read_nonfinite
from tandv_tb.torch import track, watch

NAN, INF = float("nan"), float("inf")


class Reshaped(nn.Module):
    """A linear layer whose output is written into at one step and returned as
    ``layout(output)`` (a view that is not contiguous)."""

    def __init__(self, layout, bad: list[float], at: int) -> None:
        super().__init__()
        self.lin = nn.Linear(6, 24)
        self.layout, self.bad, self.at = layout, bad, at
        self.step = 0
        self.returned: torch.Tensor | None = None

    def forward(self, x):
        y = self.lin(x)
        if self.step == self.at:
            y = y.clone()
            y.view(-1)[: len(self.bad)] = torch.tensor(self.bad)
        out = self.layout(y.view(-1, 4, 6))
        if self.step == self.at:
            self.returned = out.detach()  # a view, as returned
        return out


LAYOUTS = {
    "transposed": lambda y: y.transpose(1, 2),
    "permuted": lambda y: y.permute(2, 0, 1),
    "sliced": lambda y: y[:, ::2],
}


def _train(logdir, module: Reshaped, steps: int = 4) -> None:
    optimizer = torch.optim.SGD(module.parameters(), lr=1e-3)
    with track(module, logdir=str(logdir), optimizer=optimizer, every=100) as tracker:
        for step in range(steps):
            module.step = step
            loss = torch.nan_to_num(module(torch.randn(8, 6))).mean() * 0
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            tracker.step()


def _activation_entry(name: str, returned: torch.Tensor) -> NonfiniteEntry:
    """The entry the watch must write for the module output ``returned``, counted by numpy
    in float64 (exact for every float dtype)."""
    values = returned.double().numpy()
    return NonfiniteEntry(
        "Activation",
        name,
        int(np.isnan(values).sum()),
        int(np.isposinf(values).sum()),
        int(np.isneginf(values).sum()),
    )


@pytest.mark.parametrize("layout", LAYOUTS)
def test_nan_and_both_infs_counted_exactly_in_every_layout(tmp_path, layout):
    bad = [NAN, INF, -INF, INF, 1.0, -INF, NAN, 0.0, -INF]  # the first row of 6, and more
    module = Reshaped(LAYOUTS[layout], bad, at=2)
    _train(tmp_path, module)
    assert not module.returned.is_contiguous()
    want = _activation_entry("Reshaped", module.returned)
    assert want.posinf and want.neginf  # both infinities, also where a sum gives NaN
    found = read_nonfinite(tmp_path)
    assert [s.step for s in found] == [2]
    assert list(found[0].entries) == [want]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_finite_values_whose_sum_overflows_are_not_reported(tmp_path, layout):
    module = Reshaped(LAYOUTS[layout], [3e38] * 144, at=2)  # the whole output
    _train(tmp_path, module)
    assert torch.isinf(module.returned.sum())
    assert read_nonfinite(tmp_path) == []


def test_a_permuted_tensor_is_read_in_place_and_others_are_not():
    """The bit-pattern check reads ``numel()`` values from ``data_ptr()``: for a tensor
    dense in memory in some order of its dimensions those are exactly its values."""
    base = torch.randn(3, 4, 5)
    size_one = torch.randn(3, 1, 5).transpose(0, 2)
    offset = torch.randn(4, 4, 5)[1:].transpose(1, 2)  # dense, from the 21st value
    for view in (base.transpose(0, 2), base.permute(1, 2, 0), size_one, offset):
        assert not view.is_contiguous() or view is size_one
        assert watch._dense(view)
        block = view.as_strided((view.numel(),), (1,))
        assert block.data_ptr() == view.data_ptr()
        assert sorted(block.tolist()) == sorted(view.flatten().tolist())
    assert not watch._dense(base[:, ::2])
    assert not watch._dense(torch.randn(4, 1).expand(4, 3))


class Large(nn.Module):
    """An output of more than ``watch._SUMMED_FROM`` values (summed by torch, or read by
    its bit patterns when 16-bit) with ``bad`` written into it at step ``at``."""

    def __init__(self, dtype: torch.dtype, layout, bad: list[float], at: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones((), dtype=dtype))
        self.dtype, self.layout, self.bad, self.at = dtype, layout, bad, at
        self.step = 0
        self.returned: torch.Tensor | None = None

    def forward(self, x):
        y = torch.ones(513, 512, dtype=self.dtype) * self.scale
        if self.step == self.at:
            y = y.clone()
            y.view(-1)[-len(self.bad) :] = torch.tensor(self.bad, dtype=self.dtype)
        out = self.layout(y)
        if self.step == self.at:
            self.returned = out.detach()
        return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_a_large_tensor_is_counted_exactly_and_a_finite_overflow_is_not_reported(
    tmp_path, dtype, layout
):
    arrange = {"contiguous": lambda y: y, "transposed": torch.t, "sliced": LAYOUTS["sliced"]}
    arrange = arrange[layout]
    bad = [NAN, NAN, INF, INF, -INF, -INF, 1.0, 0.0, -INF]  # each on both column parities
    module = Large(dtype, arrange, bad, at=2)
    assert watch._SUMMED_FROM <= 513 * 512
    _train(tmp_path / "bad", module)
    # summed by torch unless 16-bit and dense (read by its bit patterns)
    summed = dtype.itemsize >= 4 or layout == "sliced"
    assert (watch._block_format(module.returned) is None) == summed
    want = _activation_entry("Large", module.returned)
    assert want.nan and want.posinf and want.neginf
    found = read_nonfinite(tmp_path / "bad")
    assert [s.step for s in found] == [2]
    assert [e for e in found[0].entries if e.tensor_type == "Activation"] == [want]

    largest = torch.finfo(dtype).max
    module = Large(dtype, arrange, [largest] * 513, at=2)  # finite; the sum overflows
    _train(tmp_path / "finite", module)
    assert torch.isinf(module.returned.sum(dtype=dtype)) and module.returned.isfinite().all()
    assert read_nonfinite(tmp_path / "finite") == []
