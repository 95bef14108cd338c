"""The JAX tracker's non-finite watch on real small Flax trainings (linen and NNX, jitted
and not), read back from disk."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen, nnx

import tandv_tb
from tandv_tb.event_files.nonfinite import NonfiniteEntry, read_nonfinite
from tandv_tb.jax import track
from tests.helpers.jax_models import GPT, NnxMLP, gpt_loss, mlp_batch, tokens

NAN, INF = float("nan"), float("inf")
EXECUTION_ORDER = ["Activation", "Gradient", "Weight_Gradient", "Weight", "Optimiser_State"]


def _in_execution_order(types: list[str]) -> bool:
    ranks = [EXECUTION_ORDER.index(t.split(".")[0]) for t in types]
    return ranks == sorted(ranks)


BATCH = 8


@jax.custom_vjp
def nan_gradient(x, on):
    """The identity; its cotangent is NaN where ``on`` (a NaN born in the backward pass)."""
    return x


def _forward(x, on):
    return x, on


def _backward(on, cotangent):
    return jnp.where(on, jnp.nan, cotangent), None


nan_gradient.defvjp(_forward, _backward)


class Poisoned(linen.Module):
    """A dense layer whose output gets ``poison`` added (NaN/Inf where it holds them)."""

    @linen.compact
    def __call__(self, x, poison):
        return linen.Dense(6)(x) + poison


class Gate(linen.Module):
    @linen.compact
    def __call__(self, x, on):
        return nan_gradient(x, on)


class Model(linen.Module):
    @linen.compact
    def __call__(self, x, poison, on):
        x = jnp.tanh(linen.Dense(6)(x))
        x = Poisoned()(x, poison)
        x = Gate()(x, on)
        return linen.Dense(1)(x)


MODEL = Model()


def _train(logdir, steps, poison_at=None, gate_at=None, jit=True, **options):
    """Linen training with SGD; returns the losses and how many times the step was traced."""
    traces = []

    def update(params, opt_state, x, poison, on):
        traces.append(1)

        def loss_fn(p):
            return jnp.mean(MODEL.apply(p, x, poison, on) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, grads, loss

    optimizer = optax.adam(1e-2)
    zeros = jnp.zeros(6)
    params = MODEL.init(jax.random.PRNGKey(0), jnp.zeros((BATCH, 6)), zeros, False)
    opt_state = optimizer.init(params)
    run = jax.jit(update) if jit else update
    losses = []
    with track(params, opt_state, logdir=str(logdir), **options) as tracker:
        for step in range(steps):
            x = jax.random.normal(jax.random.PRNGKey(step), (BATCH, 6))
            poison = poison_at.get(step, zeros) if poison_at else zeros
            on = jnp.asarray(step == gate_at)
            params, opt_state, grads, loss = tracker.intercept(
                run, params, opt_state, x, jnp.asarray(poison, jnp.float32), on
            )
            tracker.step(params, opt_state, grads)
            losses.append(np.asarray(loss).tobytes())
    return losses, len(traces)


def _steps(logdir):
    """The tensor types recorded with full statistics, by step."""
    meta = tandv_tb.read_frame(logdir)["metadata"]
    return meta.groupby("step")["tensor_type"].agg(set).to_dict()


@pytest.mark.parametrize("jit", [True, False], ids=["jit", "eager"])
def test_nan_off_the_cadence_is_named_and_the_next_step_is_tracked(tmp_path, jit):
    poison = [NAN, NAN, INF, -INF, NAN, 0.0]
    _, traces = _train(tmp_path, 12, poison_at={7: poison}, jit=jit, every=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = read_nonfinite(tmp_path)
        steps = _steps(tmp_path)
    first = found[0]
    assert first.step == 7
    assert first.entries[0] == NonfiniteEntry("Activation", "Poisoned_0", 3 * BATCH, BATCH, BATCH)
    names = [(e.tensor_type, e.name) for e in first.entries]
    assert ("Activation", "Poisoned_0.Dense_0") not in names  # the layer inside is finite
    assert ("Activation", "Dense_1") in names
    assert _in_execution_order([e.tensor_type for e in first.entries])
    assert [s.step for s in found] == [7, 8, 9, 10, 11]
    assert sorted(steps) == [0, 5, 8, 10]
    assert steps[8] == {"Activation", "Gradient", "Weight", "Weight_Gradient"} | {
        "Optimiser_State.mu",
        "Optimiser_State.nu",
    }
    if jit:  # the tracked variant and the watched one, each compiled once
        assert traces == 2


def test_a_nan_born_in_the_backward_pass_names_the_cotangent_first(tmp_path):
    _train(tmp_path, 4, gate_at=3, every=2)
    found = read_nonfinite(tmp_path)
    assert found[0].step == 3
    entries = found[0].entries
    # the cotangent of Poisoned_0 (the module before the gate) is the first NaN; the gate's
    # own output has a finite cotangent
    assert (entries[0].tensor_type, entries[0].name) == ("Gradient", "Poisoned_0")
    assert entries[0].nan == BATCH * 6
    assert not any(e.tensor_type == "Activation" for e in entries)
    assert ("Gradient", "Gate_0") not in {(e.tensor_type, e.name) for e in entries}
    assert _in_execution_order([e.tensor_type for e in entries])


def test_inf_counts_equal_numpy_on_tracked_and_untracked_steps(tmp_path):
    bad = [INF, -INF, INF, 1.0, -INF, INF]
    want = NonfiniteEntry("Activation", "Poisoned_0", 0, 3 * BATCH, 2 * BATCH)
    for step in (2, 3):  # every=2: step 2 is tracked, step 3 is not
        _train(tmp_path / str(step), step + 1, poison_at={step: bad}, every=2)
        found = read_nonfinite(tmp_path / str(step))
        assert found[0].step == step
        assert found[0].entries[0] == want


@pytest.mark.slow
def test_losses_are_bitwise_equal_with_the_watch_on_and_off(tmp_path):
    bad = {4: [NAN, 0, 0, 0, 0, 0]}
    poisoned = _train(tmp_path / "p_on", 6, poison_at=bad, every=3)[0]
    assert (
        poisoned == _train(tmp_path / "p_off", 6, poison_at=bad, every=3, watch_nonfinite=False)[0]
    )
    model = GPT()
    params = model.init(jax.random.PRNGKey(0), tokens(0)[:, :-1])
    optimizer = optax.adamw(1e-2)

    @jax.jit
    def update(params, opt_state, batch):
        loss, grads = jax.value_and_grad(lambda p: gpt_loss(model, p, batch))(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, grads, loss

    def run(name, **options):
        p, s, losses = params, optimizer.init(params), []
        with track(p, s, logdir=str(tmp_path / name), **options) as tracker:
            for step in range(6):
                p, s, grads, loss = tracker.intercept(update, p, s, tokens(step))
                tracker.step(p, s, grads)
                losses.append(np.asarray(loss).tobytes())
        return losses

    on = run("on", every=3)
    assert on == run("off", every=3, watch_nonfinite=False)
    assert on == run("never", every=1000, watch_nonfinite=False)
    assert read_nonfinite(tmp_path / "on") == []


def test_watch_nonfinite_is_validated_and_can_be_turned_off(tmp_path):
    with pytest.raises(TypeError, match="watch_nonfinite must be a bool"):
        track(logdir=str(tmp_path / "x"), watch_nonfinite="yes")
    _train(tmp_path / "off", 3, poison_at={1: [NAN] * 6}, every=5, watch_nonfinite=False)
    assert read_nonfinite(tmp_path / "off") == []
    assert sorted(_steps(tmp_path / "off")) == [0]


def test_nnx_jit_nan_in_the_batch_names_the_first_layer(tmp_path):
    model = NnxMLP(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    traces = []

    @nnx.jit
    def step_fn(model, optimizer, x, y):
        traces.append(1)

        def loss_fn(model):
            return jnp.mean((model(x) - y[:, :3]) ** 2)

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss, grads

    with track(model_state=model, optimizer_state=optimizer, logdir=str(tmp_path), every=5) as t:
        for step in range(10):
            x, y = mlp_batch(step)
            if step == 7:
                x = x.at[0, 0].set(jnp.inf)
            _, grads = t.intercept(step_fn, model, optimizer, x, y)
            t.step(grads=grads)
    found = read_nonfinite(tmp_path)
    assert found[0].step == 7
    first = found[0].entries[0]
    assert (first.tensor_type, first.name) == ("Activation", "first")
    assert _in_execution_order([e.tensor_type for e in found[0].entries])
    assert sorted(_steps(tmp_path))[:3] == [0, 5, 8]
    assert len(traces) == 2
