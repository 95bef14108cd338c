"""The PyTorch tracker and ``NumericsWriter`` on the Triton path (``TANDV_TB_KERNEL=triton``).

On a GPU they train there (``.ci/gpu-checks``); without one the kernels run on CPU tensors
in Triton's interpreter, and the trackers treat those exactly as GPU tensors (the same
kernels, the same watch, one transfer at ``step()``): the records equal the compiled CPU
kernel's (``TANDV_TB_KERNEL=cpu``: every count, the statistics within the contract's 2e-4),
the watch names what the host's names, training is bitwise unchanged, compiled or not.
Also the switch's bad inputs: an unknown value, a tensor the kernels cannot take, triton
missing. Small models: the interpreter is slow. Without triton the module skips."""

from __future__ import annotations

import sys
import warnings

import pytest
import torch
from torch import nn
from torch._dynamo.utils import counters

import tandv_tb
from tandv_tb.event_files.nonfinite import read_nonfinite
from tandv_tb.stats import _kernel_choice
from tandv_tb.torch import track
from tests.helpers import triton_source
from tests.helpers.torch_models import Poison, read_records

if not triton_source.TRITON:
    pytest.skip("triton is not installed", allow_module_level=True)

from tests.helpers.launch_counts import counting  # noqa: E402  (after the skip)

#: An element format, an MX format and nvfp4: every kernel of the Triton path.
FORMATS = ("float8_e4m3fn", "mxfp8_e4m3", "nvfp4")
#: Where the trainings run: a GPU where there is one, else the CPU (Triton's interpreter).
DEVICE = triton_source.device()
#: What a fallback to the array kernel (or the watch's torch operations) says.
FALLBACK = "instead of the Triton"


class Net(nn.Module):
    """Linear, LayerNorm, GELU, a ``Poison`` (NaN at chosen steps), linear: every tensor
    type under Adam, with rows of 32 values (an MX block) and 12 (a partial block)."""

    def __init__(self, nan_at: set[int] = frozenset()) -> None:
        super().__init__()
        self.fc1 = nn.Linear(12, 32)
        self.ln = nn.LayerNorm(32)
        self.act = nn.GELU()
        self.poison = Poison(nan_at) if nan_at else nn.Identity()
        self.fc2 = nn.Linear(32, 12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.poison(self.act(self.ln(self.fc1(x)))))


class Halves(nn.Module):
    """Every other value of its input: a view the kernels cannot read as it lies."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, ::2]


def _train(monkeypatch, kernel: str, logdir=None, steps=6, model=Net, **options):
    """Adam on fixed batches under ``TANDV_TB_KERNEL=kernel`` of the module ``model()``
    makes, tracked into ``logdir`` (plain without); the losses and final weights."""
    monkeypatch.setenv("TANDV_TB_KERNEL", kernel)
    torch.manual_seed(0)
    model = model().to(DEVICE)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    batches = [torch.randn(8, 12).to(DEVICE) for _ in range(steps)]
    tracker = None
    if logdir is not None:
        options = {"formats": FORMATS, **options}
        tracker = track(model, logdir=str(logdir), optimizer=optimizer, **options)
    losses = []
    for step, x in enumerate(batches):
        for module in model.modules():
            if isinstance(module, Poison):
                module.step = step
        loss = torch.nan_to_num(model(x)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if tracker is not None:
            tracker.step()
        losses.append(loss.item())
    if tracker is not None:
        tracker.close()
    return losses, [p.detach().clone() for p in model.parameters()]


def _assert_same_training(got, want) -> None:
    """Losses and weights equal bit for bit (NaN included)."""
    assert [float.hex(x) for x in got[0]] == [float.hex(x) for x in want[0]]
    bits = [[w.view(torch.int32) for w in run[1]] for run in (got, want)]
    assert all(torch.equal(a, b) for a, b in zip(*bits))


def _assert_same_logdirs(got, want) -> None:
    """Every record of ``got`` equal to ``want``'s (``triton_source.assert_same_records``),
    and the same non-finite entries."""
    mine, theirs = read_records(str(got)), read_records(str(want))
    assert mine.keys() == theirs.keys()
    for key, stored in theirs.items():
        triton_source.assert_same_records(mine[key].record, stored.record)
    assert read_nonfinite(str(got)) == read_nonfinite(str(want))


def test_records_watch_and_training_equal_the_cpu_kernels(tmp_path, monkeypatch):
    """``every=3`` over 6 steps, NaN written into an activation at step 4 (untracked):
    the Triton path records steps 0 and 3 and, the watch having found the NaN at step 4,
    step 5, all equal to the CPU kernel's records; losses and weights equal an untracked
    run's bit for bit. Its statistics and watch are the Triton kernels' (counted), and
    nothing fell back."""

    def model():
        return Net({4})

    plain = _train(monkeypatch, "cpu", model=model)
    cpu = _train(monkeypatch, "cpu", tmp_path / "cpu", model=model, every=3)
    with counting() as dispatched, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        triton = _train(monkeypatch, "triton", tmp_path / "triton", model=model, every=3)
    _assert_same_training(cpu, plain)
    _assert_same_training(triton, plain)
    _assert_same_logdirs(tmp_path / "triton", tmp_path / "cpu")
    frame = tandv_tb.read_frame(str(tmp_path / "triton"))
    assert sorted(set(frame["metadata"]["step"])) == [0, 3, 5]
    assert set(frame["metadata"]["tensor_type"]) == {
        "Activation", "Gradient", "Weight", "Weight_Gradient",
        "Optimiser_State.exp_avg", "Optimiser_State.exp_avg_sq",
    }  # fmt: skip
    found = read_nonfinite(str(tmp_path / "triton"))[0]  # then the NaN spreads
    assert found.step == 4 and (found.entries[0].name, found.entries[0].nan) == ("poison", 3)
    assert {"stats_main", "stats_nvfp4", "stats_finalize", "watch_kernel"} <= set(
        dispatched.launches
    )
    assert not [w for w in caught if FALLBACK in str(w.message)]


def test_numerics_writer_gives_the_cpu_kernels_records(tmp_path, monkeypatch):
    """``add_numerics`` under ``triton`` (CPU tensors in the interpreter): the Triton
    kernels, each step's statistics brought to the host when the step is written; the
    CPU kernel's records."""
    rng = torch.Generator().manual_seed(3)
    tensors = {
        "weights": torch.randn(24, 40, generator=rng),
        "halves": torch.randn(6, 33, generator=rng).to(torch.bfloat16),
        "small": (torch.randn(50, generator=rng) * 1e-5).to(torch.float16),
        "scalar": torch.tensor(3.5),
        "empty": torch.empty(0, 16),
        "broken": torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), 0.0]),
    }
    for kernel in ("cpu", "triton"):
        monkeypatch.setenv("TANDV_TB_KERNEL", kernel)
        with (
            counting() as dispatched,
            tandv_tb.NumericsWriter(str(tmp_path / kernel), formats=FORMATS) as writer,
        ):
            for step in range(2):
                for name, tensor in tensors.items():
                    writer.add_numerics(name, tensor.to(DEVICE) * (step + 1), step, "Weight")
        assert ("stats_main" in dispatched.launches) == (kernel == "triton")
    _assert_same_logdirs(tmp_path / "triton", tmp_path / "cpu")
    assert len(read_records(str(tmp_path / "triton"))) == 2 * len(tensors)


def test_compiled_records_equal_eager_without_a_graph_break(tmp_path, monkeypatch):
    """A compiled model under ``triton`` (``aot_eager``: computes as eagerly, so that the
    records compare), a tracked step and an untracked one with the watch: the observe
    operator hands each tensor to the same Triton kernels, with no graph break; the
    eager records, and the eager training (which equals an untracked one: above)."""
    eager = _train(monkeypatch, "triton", tmp_path / "eager", steps=2, every=2)
    torch.compiler.reset()
    breaks = sum(counters["graph_break"].values())
    with counting() as dispatched:
        compiled = _train(
            monkeypatch,
            "triton",
            tmp_path / "compiled",
            steps=2,
            model=lambda: torch.compile(Net(), backend="aot_eager"),
            every=2,
        )
    assert sum(counters["graph_break"].values()) == breaks
    torch.compiler.reset()
    assert {"stats_main", "watch_kernel"} <= set(dispatched.launches)
    _assert_same_training(compiled, eager)
    records = read_records(str(tmp_path / "compiled"))
    eager_records = read_records(str(tmp_path / "eager"))
    assert records.keys() == eager_records.keys()  # the loss is outside: every gradient
    for key, stored in records.items():
        triton_source.assert_same_records(stored.record, eager_records[key].record)


def test_an_unknown_kernel_is_a_value_error_at_track(tmp_path, monkeypatch):
    monkeypatch.setenv("TANDV_TB_KERNEL", "cuda")
    with pytest.raises(ValueError, match="expected one of auto, cpu, array, triton"):
        track(Net(set()), logdir=str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_a_view_the_kernels_cannot_read_falls_back_warned_once(tmp_path, monkeypatch):
    """A module output that is every other value of its input: the array kernel (and the
    watch's torch operations) take it, once warned; the records are the CPU kernel's, and
    the watch still finds a NaN in it."""
    monkeypatch.setattr(_kernel_choice, "fallbacks", type(_kernel_choice.fallbacks)())

    def model():
        return nn.Sequential(Net({1}), Halves(), nn.Linear(6, 3))

    cpu = _train(monkeypatch, "cpu", tmp_path / "cpu", steps=2, model=model, every=2)
    with pytest.warns(RuntimeWarning, match="not dense in memory") as warned:
        triton = _train(monkeypatch, "triton", tmp_path / "triton", steps=2, model=model, every=2)
    assert len([w for w in warned if FALLBACK in str(w.message)]) == 1
    assert sum(_kernel_choice.fallbacks.values()) >= 2  # counted: the statistics, the watch
    _assert_same_training(triton, cpu)
    _assert_same_logdirs(tmp_path / "triton", tmp_path / "cpu")
    [found] = read_nonfinite(str(tmp_path / "triton"))
    assert "1" in {e.name for e in found.entries}  # Halves, named by its place


def test_without_triton_the_array_kernel_with_one_warning(tmp_path, monkeypatch):
    """``triton`` where triton does not import: the array kernel and the watch's torch
    operations, one warning naming ``pip install triton``, the CPU kernel's records."""

    def model():
        return Net({1})

    cpu = _train(monkeypatch, "cpu", tmp_path / "cpu", steps=3, model=model, every=2)
    monkeypatch.setitem(sys.modules, "tandv_tb.stats._triton_launch", None)
    _kernel_choice.triton_launch.cache_clear()
    _kernel_choice.triton_watch.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="pip install triton") as warned:
            array = _train(monkeypatch, "triton", tmp_path / "array", steps=3, model=model, every=2)
    finally:
        _kernel_choice.triton_launch.cache_clear()
        _kernel_choice.triton_watch.cache_clear()
    assert len([w for w in warned if "pip install triton" in str(w.message)]) == 1
    _assert_same_training(array, cpu)
    _assert_same_logdirs(tmp_path / "array", tmp_path / "cpu")
    assert read_nonfinite(str(tmp_path / "array"))[0].step == 1
