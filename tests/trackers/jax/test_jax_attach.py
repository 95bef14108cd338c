"""``tandv_tb.jax.attach`` and ``track_inputs=True`` under ``jax.jit`` (linen) and ``nnx.jit``:
values and gradients equal to the float64 reference of the same arrays, taken from the same
compiled program (``sow`` and ``perturb``) or computed by hand with ``jax.grad``."""

from __future__ import annotations

import types
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen as nn
from flax import nnx

from tandv_tb.jax import UntrackableArrayWarning, attach, track
from tandv_tb.jax.attaching import EMPTY_NAME
from tests.helpers.jax_models import assert_same, expected, mlp_batch, read_records
from tests.helpers.reference import assert_matches


def matches_reference(stored, array) -> None:
    """The stored record equals the float64 numpy reference of ``array``."""
    values = np.asarray(array)
    assert_matches(types.SimpleNamespace(to_record=lambda: stored.record), values, (), 1e-5)


class Attached(nn.Module):
    """Dense, an attached intermediate (sown and perturbed for the oracle), Dense."""

    @nn.compact
    def __call__(self, x):
        h = jnp.tanh(nn.Dense(8)(x)) * 3.0
        h = attach(h, "scaled")
        self.sow("intermediates", "scaled", h)
        h = self.perturb("scaled", h)
        return nn.Dense(4)(h)


MODEL = Attached()


def init():
    x, _ = mlp_batch(0)
    variables = MODEL.init(jax.random.PRNGKey(0), x)
    return variables["params"], variables["perturbations"]


def make_update(optimizer):
    def update(params, opt_state, perturbations, batch):
        x, y = batch

        def loss_fn(params, perturbations):
            out, state = MODEL.apply(
                {"params": params, "perturbations": perturbations}, x, mutable=["intermediates"]
            )
            return jnp.mean((out - y) ** 2), state["intermediates"]["scaled"][0]

        (loss, scaled), (grads, cotangents) = jax.value_and_grad(
            loss_fn, argnums=(0, 1), has_aux=True
        )(params, perturbations)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        oracle = (scaled, cotangents["scaled"], x)
        return optax.apply_updates(params, updates), opt_state, loss, oracle

    return jax.jit(update)


def train(logdir, steps: int = 2, tracked: bool = True, **options):
    params, perturbations = init()
    optimizer = optax.sgd(0.1)
    opt_state = optimizer.init(params)
    update = make_update(optimizer)
    seen = []
    tracker = track(logdir=str(logdir), **options) if tracked else None
    for step in range(steps):
        run = tracker.intercept if tracked else (lambda fn, *a: fn(*a))
        params, opt_state, loss, oracle = run(
            update, params, opt_state, perturbations, mlp_batch(step)
        )
        if tracked:
            tracker.step(params, opt_state)
        seen.append((loss, oracle))
    if tracked:
        tracker.close()
    return seen


@pytest.fixture(scope="module")
def linen_run(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("linen_attach")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UntrackableArrayWarning)
        seen = train(logdir, track_inputs=True)
    return read_records(str(logdir)), seen


def test_linen_attached_array_and_gradient_under_jit_match_the_reference(linen_run):
    records, seen = linen_run
    for step, (_, (scaled, cotangent, _)) in enumerate(seen):
        matches_reference(records["Attached.scaled", "Activation", step], scaled)
        matches_reference(records["Attached.scaled", "Gradient", step], cotangent)
    order = {n: records[n, "Activation", 0].order for n in ("Dense_0", "Attached.scaled")}
    assert order["Dense_0"] < order["Attached.scaled"] < records["Dense_1", "Activation", 0].order


def test_linen_inputs_and_input_gradients_match_jax_grad(linen_run):
    records, seen = linen_run
    for step, (_, (scaled, cotangent, x)) in enumerate(seen):
        # Dense_1 is given the attached array: its gradient is jax.grad w.r.t. it.
        matches_reference(records["Dense_1", "Input", step], scaled)
        matches_reference(records["Dense_1", "Input_Gradient", step], cotangent)
        # The batch is not differentiated: recorded, without a gradient.
        matches_reference(records["Dense_0", "Input", step], x)
        matches_reference(records["Attached", "Input", step], x)
    assert ("Dense_0", "Input_Gradient", 0) not in records
    assert records["Attached", "Input", 0].order < records["Dense_0", "Input", 0].order
    assert records["Dense_0", "Input", 0].order < records["Dense_0", "Activation", 0].order


def test_losses_are_bitwise_equal_with_and_without_tracking(linen_run, tmp_path):
    _, seen = linen_run
    plain = train(tmp_path, tracked=False)
    for (tracked_loss, _), (plain_loss, _) in zip(seen, plain):
        np.testing.assert_array_equal(np.asarray(tracked_loss), np.asarray(plain_loss))


def test_attach_outside_intercept_returns_its_argument(tmp_path):
    x = jnp.ones(3)
    assert attach(x, "free") is x
    train(tmp_path, steps=3, every=2)
    steps = {s for n, t, s in read_records(str(tmp_path)) if n == "Attached.scaled"}
    assert steps == {0, 2}


def test_attach_in_a_plain_function_and_bad_arguments(tmp_path):
    hostile = "<b>x</b>/.."

    def f(x):
        y = attach(x * 2.0, hostile)
        attach(y, "")
        attach(jnp.arange(3), "ints")
        attach("text", "text")
        return attach(y, hostile).sum()  # twice in a call: one record covering both

    x = jnp.arange(4.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with track(logdir=str(tmp_path)) as tracker:
            for _ in range(2):
                tracker.intercept(jax.jit(f), x)
                tracker.step()
    messages = [str(w.message) for w in caught if w.category is UntrackableArrayWarning]
    assert len(messages) == 2 and any("'ints'" in m for m in messages), messages
    records = read_records(str(tmp_path))
    assert_same(records[hostile, "Activation", 0].record, expected([x * 2.0, x * 2.0]))
    assert (EMPTY_NAME, "Activation", 1) in records


class NnxAttached(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.first = nnx.Linear(6, 12, rngs=rngs)
        self.last = nnx.Linear(12, 3, rngs=rngs)

    def __call__(self, x):
        return self.last(attach(jax.nn.relu(self.first(x)) * 2.0, "hidden"))


def test_nnx_attach_and_inputs_under_nnx_jit(tmp_path):
    model = NnxAttached(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    x, y = mlp_batch(0)
    y = y[:, :3]

    def loss_of_hidden(hidden):
        return jnp.mean((model.last(hidden) - y) ** 2)

    hidden = jax.nn.relu(model.first(x)) * 2.0  # by hand, before the update
    grad_hidden = jax.grad(loss_of_hidden)(hidden)

    @nnx.jit
    def step(model, optimizer, x, y):
        loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
        optimizer.update(model, grads)
        return loss

    with track(model, optimizer, logdir=str(tmp_path), track_inputs=True) as tracker:
        tracker.intercept(step, model, optimizer, x, y)
        tracker.step()
    records = read_records(str(tmp_path))
    for key in (("NnxAttached.hidden", "Activation"), ("last", "Input")):
        assert_same(records[(*key, 0)].record, expected(hidden))
    for key in (("NnxAttached.hidden", "Gradient"), ("last", "Input_Gradient")):
        assert_same(records[(*key, 0)].record, expected(grad_hidden))
    assert_same(records["first", "Input", 0].record, expected(x))
    hidden_order = records["NnxAttached.hidden", "Activation", 0].order
    assert records["first", "Activation", 0].order < hidden_order
