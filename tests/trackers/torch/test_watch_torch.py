"""The PyTorch tracker's non-finite watch on real small trainings, read back from disk."""

from __future__ import annotations

import struct
import warnings

import ml_dtypes
import numpy as np
import pytest
import torch
from torch import nn

import tandv_tb
from tandv_tb.event_files.nonfinite import NonfiniteEntry, read_nonfinite
from tandv_tb.stats.finite import nonfinite_at, nonfinite_in
from tandv_tb.torch import track, watch
from tandv_tb.torch.parallel_layout import ParallelLayout, Spread
from tests.helpers.torch_models import GPT, NanGradient, gpt_loss
from tests.helpers.triton_source import TRITON

NAN, INF = float("nan"), float("inf")
#: ``TANDV_TB_KERNEL`` values that watch CPU tensors as a GPU's: by torch operations, and
#: by the Triton watch (in Triton's interpreter; where triton is installed).
DEVICE_KERNELS = ["array", *(["triton"] if TRITON else [])]
EXECUTION_ORDER = ["Activation", "Gradient", "Weight_Gradient", "Weight"]


class Poison(nn.Module):
    """A linear layer whose output gets NaN/Inf written into it at chosen steps."""

    def __init__(self, values: dict[int, list[float]]) -> None:
        super().__init__()
        self.lin = nn.Linear(6, 6)
        self.values = values  # step -> values written at the start of the output
        self.step = 0
        self.outputs: dict[int, torch.Tensor] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        bad = self.values.get(self.step)
        if bad is not None:
            y = y.clone()
            y.view(-1)[: len(bad)] = torch.tensor(bad)
        self.outputs[self.step] = y.detach().clone()
        return y


class BackwardPoison(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.on = False

    def forward(self, x):
        return NanGradient.apply(x) if self.on else x


def _train(model, logdir, steps, on_step=None, **options):
    torch.manual_seed(1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    batches = [torch.randn(8, 6) for _ in range(steps)]
    losses = []
    with track(model, logdir=str(logdir), optimizer=optimizer, **options) as tracker:
        for step, x in enumerate(batches):
            if on_step is not None:
                on_step(step)
            loss = model(x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            tracker.step()
            losses.append(loss.detach())
    return losses


def _steps(logdir):
    """The tensor types recorded with full statistics, by step."""
    meta = tandv_tb.read_frame(logdir)["metadata"]
    return meta.groupby("step")["tensor_type"].agg(set).to_dict()


def test_nan_off_the_cadence_is_named_and_the_next_step_is_tracked(tmp_path):
    poison = Poison({7: [NAN, NAN, INF, -INF, NAN]})
    model = nn.Sequential(nn.Linear(6, 6), poison, nn.Linear(6, 1))
    _train(model, tmp_path, 12, on_step=lambda s: setattr(poison, "step", s), every=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = read_nonfinite(tmp_path)
        steps = _steps(tmp_path)
    first = found[0]
    assert first.step == 7
    assert first.entries[0] == NonfiniteEntry("Activation", "1", nan=3, posinf=1, neginf=1)
    # its effects follow, in execution order: later activations, then gradients...
    types = [e.tensor_type for e in first.entries]
    assert types == sorted(types, key=EXECUTION_ORDER.index)
    assert ("Activation", "2") in {(e.tensor_type, e.name) for e in first.entries}
    assert ("Activation", "0") not in {(e.tensor_type, e.name) for e in first.entries}
    # the weights are NaN from then on: every later step is recorded...
    assert [s.step for s in found] == [7, 8, 9, 10, 11]
    # ... and step 8, off the cadence, is tracked in full (once: not 9, 11)
    assert sorted(steps) == [0, 5, 8, 10]
    everything = {"Activation", "Gradient", "Weight", "Weight_Gradient"}
    assert steps[8] == everything
    assert not any(e.tensor_type.startswith("Optimiser") for s in found for e in s.entries)


@pytest.mark.parametrize("kernel", DEVICE_KERNELS)
def test_counts_kept_on_the_device_give_the_same_record(tmp_path, monkeypatch, kernel):
    """The paths for GPU tensors (counts computed on the device by torch operations or by
    the Triton watch, read at ``step()``), here taken by CPU tensors (``TANDV_TB_KERNEL``;
    Triton's in its interpreter): no GPU on the test machines."""

    def run(logdir):
        poison = Poison({7: [NAN, NAN, INF, -INF, NAN]})
        model = nn.Sequential(nn.Linear(6, 6), poison, nn.Linear(6, 1))
        _train(model, logdir, 9, on_step=lambda s: setattr(poison, "step", s), every=5)
        return read_nonfinite(logdir)

    on_host = run(tmp_path / "host")
    monkeypatch.setenv("TANDV_TB_KERNEL", kernel)
    assert run(tmp_path / "device") == on_host
    assert on_host[0].step == 7


class WithUnused(nn.Module):
    """Two linear layers, and a third never run (its weights stay as set)."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.second, self.unused = nn.Linear(6, 6), nn.Linear(6, 1), nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x))


@pytest.mark.parametrize("kernel", DEVICE_KERNELS)
def test_weights_checked_on_the_device_give_the_same_record(tmp_path, monkeypatch, kernel):
    """At ``step()`` a device's weights and optimizer state are checked by their sums and
    counted where a sum is not finite (``array``), or counted by the Triton watch: the
    host's entries, and none for finite values whose sum overflows (here taken by CPU
    tensors: no GPU on the test machines)."""

    def run(logdir):
        torch.manual_seed(0)
        model = WithUnused()
        with torch.no_grad():
            model.unused.weight.fill_(3e38)  # finite, but their float32 sum is +inf
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        with track(model, logdir=str(logdir), optimizer=optimizer, every=5) as tracker:
            for step in range(4):
                loss = model(torch.randn(8, 6)).pow(2).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                if step == 3:  # an untracked step
                    with torch.no_grad():
                        model.first.weight.view(-1)[:4] = torch.tensor([NAN, INF, -INF, NAN])
                tracker.step()
        return read_nonfinite(logdir)

    on_host = run(tmp_path / "host")
    monkeypatch.setenv("TANDV_TB_KERNEL", kernel)
    assert run(tmp_path / "device") == on_host
    assert [(s.step, s.entries) for s in on_host] == [
        (3, (NonfiniteEntry("Weight", "first.weight", 2, 1, 1),))
    ]


@pytest.mark.parametrize("kernel", DEVICE_KERNELS)
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float8_e5m2, torch.float8_e4m3fn]
)
def test_the_sums_at_step_count_like_the_host_in_every_dtype(monkeypatch, dtype, kernel):
    """``check_all`` of tensors that stay unchanged, on a device (by their sums, or by the
    Triton watch) and on the host: the same entries, for NaN/Inf and for finite values
    whose sum overflows."""
    largest = torch.finfo(dtype).max
    tensors = [
        ("clean", torch.randn(300)),
        ("large", torch.full((300,), largest)),  # float32, bfloat16: a sum past float32's max
        ("bad", torch.tensor([1.0, NAN, INF, -INF, NAN, 2.0])),
        ("strided", torch.tensor([[NAN, 1.0], [INF, 2.0]]).t()),
    ]
    named = [(name, "Weight", t.to(dtype)) for name, t in tensors]
    one_process = ParallelLayout((), combining=False)

    def drained():
        check = watch.Watch(one_process)
        check.check_all([(*n, Spread.WHOLE) for n in named], unchanged=True)
        return check.drain()

    on_host = drained()
    monkeypatch.setenv("TANDV_TB_KERNEL", kernel)
    assert drained() == on_host
    want = {}
    for name, _, tensor in named:
        values = tensor.float().numpy()
        counts = tuple(int(f(values).sum()) for f in (np.isnan, np.isposinf, np.isneginf))
        if any(counts):
            want[name] = counts
    assert {e.name: (e.nan, e.posinf, e.neginf) for e in on_host} == want
    assert set(want) == {"bad", "strided"}


def test_counts_equal_numpy_on_tracked_and_untracked_steps(tmp_path):
    bad = [INF, INF, -INF, NAN, 1.0, -INF, INF]
    poison = Poison({2: bad, 4: bad})  # every=2: step 4 tracked, step 2 tracked, 3 not
    poison.values[3] = [-INF] * 5 + [NAN] * 2
    model = nn.Sequential(poison, nn.ReLU())
    for p in model.parameters():
        p.requires_grad_(False)
    model.append(nn.Linear(6, 1))
    _train(model, tmp_path, 5, on_step=lambda s: setattr(poison, "step", s), every=2)
    found = {s.step: s.entries for s in read_nonfinite(tmp_path)}
    for step in (2, 3, 4):
        output = poison.outputs[step].numpy()
        want = (
            int(np.isnan(output).sum()),
            int(np.isposinf(output).sum()),
            int(np.isneginf(output).sum()),
        )
        first = found[step][0]
        assert (first.tensor_type, first.name) == ("Activation", "0")
        assert (first.nan, first.posinf, first.neginf) == want
        # ReLU keeps NaN and +Inf, makes -Inf 0
        assert found[step][1] == NonfiniteEntry("Activation", "1", want[0], want[1], 0)


def test_a_nan_born_in_the_backward_pass_names_the_gradient_first(tmp_path):
    gate = BackwardPoison()
    model = nn.Sequential(nn.Linear(6, 6), nn.Tanh(), gate, nn.Linear(6, 1))
    _train(model, tmp_path, 4, on_step=lambda s: setattr(gate, "on", s == 3), every=2)
    found = read_nonfinite(tmp_path)
    assert found[0].step == 3
    entries = found[0].entries
    # the gradient w.r.t. Tanh's output is the first NaN: the module after it ("2", the
    # gate) returned a finite gradient w.r.t. its own output
    assert (entries[0].tensor_type, entries[0].name) == ("Gradient", "1")
    assert entries[0].nan == 8 * 6
    assert not any(e.tensor_type == "Activation" for e in entries)
    assert ("Gradient", "2") not in {(e.tensor_type, e.name) for e in entries}
    types = [e.tensor_type for e in entries]
    assert types == sorted(types, key=EXECUTION_ORDER.index)
    assert ("Weight_Gradient", "0.weight") in {(e.tensor_type, e.name) for e in entries}


class Transposed(nn.Module):
    def forward(self, x):
        return x.t()


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_the_bit_pattern_check_finds_nan_and_inf_and_only_them(dtype):
    numpy_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    values = np.random.default_rng(0).standard_normal(1001).astype(numpy_dtype)
    largest = ml_dtypes.finfo(numpy_dtype).max
    values[3], values[4], values[5] = (
        largest,
        -largest,
        ml_dtypes.finfo(numpy_dtype).smallest_subnormal,
    )
    blocks = [values, values[:0]]
    for position, bad in ((517, NAN), (0, INF), (1000, -INF), (6, -NAN)):
        poisoned = values.copy()
        poisoned[position] = bad
        blocks.append(poisoned)
    expected = [not np.isfinite(block.astype(np.float64)).all() for block in blocks]
    assert expected == [False, False, True, True, True, True]
    addresses = np.array([block.ctypes.data for block in blocks], dtype=np.int64)
    counts = np.array([block.size for block in blocks], dtype=np.int64)
    assert nonfinite_at(addresses, counts, dtype).tolist() == expected
    assert [nonfinite_in(int(a), int(n), dtype) for a, n in zip(addresses, counts)] == expected


def test_finite_values_whose_sum_overflows_write_nothing(tmp_path):
    poison = Poison({1: [3e38] * 36})  # finite, but their float32 sum is +inf
    model = nn.Sequential(poison, Transposed())  # a transposed output: read in memory order
    model.requires_grad_(False)
    scale = nn.Parameter(torch.ones(()))
    optimizer = torch.optim.SGD([scale], lr=1e-2)
    with track(model, logdir=str(tmp_path), optimizer=optimizer, every=5) as tracker:
        for step in range(3):
            poison.step = step
            loss = (model(torch.randn(8, 6)) * 0).mean() + scale**2
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            tracker.step()
    assert torch.isinf(poison.outputs[1].sum())
    assert not model(torch.randn(8, 6)).is_contiguous()
    assert read_nonfinite(tmp_path) == []
    assert sorted(_steps(tmp_path)) == [0]


def _bits(losses):
    return [struct.pack("<f", loss.item()) for loss in losses]


@pytest.mark.parametrize("poisoned", [False, True])
def test_losses_are_bitwise_equal_with_the_watch_on_and_off(tmp_path, poisoned):
    def run(name, **options):
        torch.manual_seed(0)
        model = GPT(vocab=32, width=16, heads=2, hidden=32, depth=2, length=8)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        generator = torch.Generator().manual_seed(0)
        losses = []
        with track(model, logdir=str(tmp_path / name), optimizer=optimizer, **options) as t:
            for step in range(6):
                if poisoned and step == 4:
                    with torch.no_grad():
                        model.blocks[0].mlp[0].weight[0, 0] = NAN
                loss = gpt_loss(model, torch.randint(0, 32, (4, 9), generator=generator))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                t.step()
                losses.append(loss.detach())
        return _bits(losses)

    on = run("on", every=3)
    assert on == run("off", every=3, watch_nonfinite=False)
    assert on == run("never", every=1000, watch_nonfinite=False)
    assert bool(read_nonfinite(tmp_path / "on")) == poisoned
    assert read_nonfinite(tmp_path / "off") == []


def test_watch_nonfinite_is_validated_and_can_be_turned_off(tmp_path):
    with pytest.raises(TypeError, match="watch_nonfinite must be a bool"):
        track(nn.Linear(2, 2), logdir=str(tmp_path / "x"), watch_nonfinite=1)
    poison = Poison({1: [NAN]})
    model = nn.Sequential(poison, nn.Linear(6, 1))
    _train(
        model,
        tmp_path / "off",
        3,
        on_step=lambda s: setattr(poison, "step", s),
        every=5,
        watch_nonfinite=False,
    )
    assert read_nonfinite(tmp_path / "off") == []
    assert sorted(_steps(tmp_path / "off")) == [0]


def test_include_selects_what_the_watch_checks(tmp_path):
    poison = Poison({1: [NAN]})
    model = nn.Sequential(poison, nn.Linear(6, 1))
    _train(
        model,
        tmp_path,
        2,
        on_step=lambda s: setattr(poison, "step", s),
        every=5,
        include=r"^1",
        track_weights=False,
    )
    found = read_nonfinite(tmp_path)
    assert [(e.tensor_type, e.name) for e in found[0].entries] == [
        ("Activation", "1"),
        ("Gradient", "1"),
    ]


def test_an_input_turning_nan_off_the_cadence_is_named_as_an_input(tmp_path):
    model = nn.Sequential(nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 1))
    torch.manual_seed(1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    batches = [torch.randn(8, 6) for _ in range(9)]
    batches[7][2, 3] = NAN
    with track(model, logdir=str(tmp_path), optimizer=optimizer, every=5, track_inputs=True) as t:
        for x in batches:
            loss = model(x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            t.step()
    first = read_nonfinite(tmp_path)[0]
    assert first.step == 7
    named = [(e.tensor_type, e.name) for e in first.entries]
    # the model's own input, then its first layer's (the same tensor), before any output
    assert named[:2] == [("Input", "Sequential"), ("Input", "0")]
    assert first.entries[1] == NonfiniteEntry("Input", "0", nan=1, posinf=0, neginf=0)
    assert named.index(("Input", "2")) < named.index(("Activation", "2"))
    assert ("Activation", "0") in named
