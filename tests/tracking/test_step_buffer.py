"""The one path a tracked step's statistics take to the host (``StepBuffer``, ``stats.fetch``
of a compiled program's packed result) and the one order of tracked tensors (``Orders``),
checked against each tensor's statistics computed alone on the host."""

from __future__ import annotations

import numpy as np
import pytest

from tandv_tb import stats
from tandv_tb.event_files.record import COUNTS
from tandv_tb.stats import Packed, Slot, TensorStats
from tandv_tb.tracking.orders import Orders
from tandv_tb.tracking.step_buffer import StepBuffer

FORMATS = ("float8_e4m3fn",)
RNG = np.random.default_rng(7)


def _values(n: int, scale: float) -> np.ndarray:
    values = (RNG.standard_normal(n) * scale).astype(np.float32)
    values[:3] = [0.0, np.inf, 1e-40]  # a zero, an Inf, a float32 subnormal
    return values


def _counts(merged: TensorStats) -> tuple:
    """What must agree exactly: every count, the histogram and the cast counts."""
    return (
        merged.dtype,
        *(getattr(merged, name) for name in COUNTS),
        merged.finite_count,
        merged.hist_lo,
        merged.hist.tolist(),
        merged.underflow.tolist(),
        merged.overflow.tolist(),
    )


def _packed(arrays: list[np.ndarray], layouts: list[list[tuple[str, str, str]]], chosen: int):
    """What a compiled program returns for ``arrays`` (``chosen``: the layout it traced),
    made by jax's array kernel inside ``jax.jit``, as the JAX tracker's are."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    from tandv_tb.jax import array_stats

    def program(xs):
        started = [array_stats.in_program(x, FORMATS) for x in xs]
        counts = jnp.concatenate([p.counts for p in started])
        moments = jnp.concatenate([p.moments for p in started])
        return jnp.asarray(chosen, jnp.int32), counts, moments, started

    layout, counts, moments, started = jax.jit(program)([jnp.asarray(a) for a in arrays])
    slots = [
        Slot(label, p.dtype, p.formats, p.counts.shape[0], p.moments.shape[0])
        for label, p in zip(layouts[chosen], started)
    ]
    return Packed([[], slots] if chosen else [slots], layout, counts, moments)


def test_a_packed_result_and_pending_parts_reach_the_host_in_one_fetch_merged_per_tensor():
    first, second, again = _values(300, 3.0), _values(200, 1e-3), _values(100, 40.0)
    labels = [("fc", "Activation", "Dense"), ("fc", "Gradient", "Dense")]
    buffer = StepBuffer()
    buffer.add("fc", "Activation", "Dense", stats.compute(again, FORMATS))  # an eager call
    buffer.add_packed(_packed([first, second], [[], labels], chosen=1))  # layout 1 picked
    results = buffer.drain()
    assert [(e.name, e.tensor_type, e.module_type, len(e.parts)) for e, _ in results] == [
        ("fc", "Activation", "Dense", 2),
        ("fc", "Gradient", "Dense", 1),
    ]
    want_activation = stats.tensor_stats(again, FORMATS).merge(stats.tensor_stats(first, FORMATS))
    want_gradient = stats.tensor_stats(second, FORMATS)
    for (_, merged), want in zip(results, [want_activation, want_gradient]):
        assert _counts(merged) == _counts(want)
        assert merged.moments["max_abs"] == want.moments["max_abs"]
        assert merged.moments["sum_s2"] == pytest.approx(want.moments["sum_s2"], rel=1e-5)
    assert len(buffer) == 0


def test_results_keep_what_they_fetched_and_add_what_came_since():
    buffer = StepBuffer()
    early, late = _values(64, 2.0), _values(32, 5.0)
    buffer.add("w", "Weight", "Linear", stats.compute(early, FORMATS))
    ((entry, merged),) = buffer.results()
    assert entry.parts == [merged]  # on the host now, kept
    buffer.add("w", "Weight", "Linear", stats.compute(late, FORMATS))
    ((_, both),) = buffer.drain()
    want = stats.tensor_stats(early, FORMATS).merge(stats.tensor_stats(late, FORMATS))
    assert _counts(both) == _counts(want)


def test_fetch_gives_a_packed_results_tensors_by_label_in_its_layouts_order():
    arrays = [_values(50, 1.0), _values(70, 100.0), _values(30, 1e-6)]
    labels = [("a", "Activation", ""), ("b", "Activation", ""), ("c", "Gradient", "")]
    (fetched,) = stats.fetch([_packed(arrays, [labels], chosen=0)])
    assert [label for label, _ in fetched] == labels
    for (_, got), values in zip(fetched, arrays):
        assert _counts(got) == _counts(stats.tensor_stats(values, FORMATS))


def test_orders_place_module_tensors_by_first_sight_and_parameters_by_their_module():
    orders = Orders()
    orders.module("block.fc", "Activation")  # placed as it ran, its value not recorded
    seen = [
        ("block", "Input"),
        ("block.norm", "Activation"),
        ("block.fc", "Gradient"),  # takes its value's place
        ("block.norm.scale", "Weight"),
        ("block.fc.kernel", "Weight"),
        ("block.fc.bias", "Weight"),
        ("block.fc.kernel", "Optimiser_State.mu"),
        ("loose_10", "Weight"),
        ("loose_2", "Weight"),
    ]
    got = dict(zip(seen, orders.of(seen)))
    assert got[("block.fc", "Gradient")] == 0
    assert got[("block", "Input")] == 1 and got[("block.norm", "Activation")] == 2
    weights = sorted((n for n, t in seen if t == "Weight"), key=lambda n: got[(n, "Weight")])
    # fc ran before norm here; a module's own parameters in natural order; loose ones last
    assert weights == [
        "block.fc.bias",
        "block.fc.kernel",
        "block.norm.scale",
        "loose_2",
        "loose_10",
    ]
    assert got[("block.fc.kernel", "Optimiser_State.mu")] == got[("block.fc.kernel", "Weight")]
    assert orders.of([("block.norm", "Gradient")]) == [2]  # stable across steps


def test_parameters_given_ahead_keep_their_order():
    orders = Orders(["fc.weight", "fc.bias", "head.weight"])
    orders.module("head", "Activation")
    orders.module("fc", "Activation")
    names = ["head.weight", "fc.bias", "fc.weight", "extra.0"]
    assert orders.of((n, "Weight") for n in names) == [2, 1, 0, 3]
