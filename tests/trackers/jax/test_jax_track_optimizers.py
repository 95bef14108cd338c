"""``track`` on optimizer states: optax states by parameter and key, masked, a Flax TrainState."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import optax
import pytest

from tandv_tb.jax import track
from tests.helpers.jax_models import read_records


@pytest.mark.parametrize(
    "optimizer, types",
    [
        (optax.sgd(0.1, momentum=0.9), {"Optimiser_State.trace"}),
        (
            optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3)),
            {"Optimiser_State.mu", "Optimiser_State.nu"},
        ),
        (
            optax.inject_hyperparams(optax.adam)(learning_rate=1e-3),
            {"Optimiser_State.mu", "Optimiser_State.nu"},
        ),
        (
            optax.MultiSteps(optax.adam(1e-3), every_k_schedule=2),
            {"Optimiser_State.mu", "Optimiser_State.nu", "Optimiser_State.acc_grads"},
        ),
        (
            optax.chain(optax.adam(1e-3), optax.adam(1e-3)),
            {
                "Optimiser_State.0.0.mu",
                "Optimiser_State.0.0.nu",
                "Optimiser_State.1.0.mu",
                "Optimiser_State.1.0.nu",
            },
        ),
    ],
    ids=["sgd_momentum", "chain_clip_adamw", "inject_hyperparams", "multi_steps", "two_adams"],
)
def test_optax_states_are_named_by_parameter_and_typed_by_key(tmp_path, optimizer, types):
    params = {"params": {"Dense_0": {"kernel": jnp.ones((3, 2)), "bias": jnp.zeros(2)}}}
    opt_state = optimizer.init(params)
    grads = jax.tree.map(lambda p: p * 0.5 + 0.25, params)
    _, opt_state = optimizer.update(grads, opt_state, params)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scalar counters and hyperparameters: silent
        with track(model_state=params, optimizer_state=opt_state, logdir=str(tmp_path)) as t:
            t.step(params, opt_state, grads)
    records = read_records(str(tmp_path))
    state_types = {t for _, t, _ in records if t.startswith("Optimiser_State.")}
    assert state_types == types
    for tensor_type in types:
        names = {n for n, t, _ in records if t == tensor_type}
        assert names == {"Dense_0.kernel", "Dense_0.bias"}


def test_masked_optimizer_state_covers_only_the_masked_parameters(tmp_path):
    params = {"kernel": jnp.ones((3, 2)), "bias": jnp.zeros(2)}
    optimizer = optax.masked(optax.adam(1e-3), {"kernel": True, "bias": False})
    opt_state = optimizer.init(params)
    with track(model_state=params, optimizer_state=opt_state, logdir=str(tmp_path)) as t:
        t.step(params, opt_state)
    records = read_records(str(tmp_path))
    assert {(n, t) for n, t, _ in records if t.startswith("Optimiser")} == {
        ("kernel", "Optimiser_State.mu"),
        ("kernel", "Optimiser_State.nu"),
    }


def test_a_flax_train_state_gives_weights_and_optimizer_state(tmp_path):
    from flax.training.train_state import TrainState

    params = {"params": {"Dense_0": {"kernel": jnp.ones((3, 2)), "bias": jnp.zeros(2)}}}
    state = TrainState.create(apply_fn=lambda *a: None, params=params, tx=optax.adam(1e-3))
    with track(model_state=state, logdir=str(tmp_path)) as tracker:
        tracker.step(state)
    records = read_records(str(tmp_path))
    assert {(n, t) for n, t, _ in records} == {
        (f"Dense_0.{leaf}", tensor_type)
        for leaf in ("kernel", "bias")
        for tensor_type in ("Weight", "Optimiser_State.mu", "Optimiser_State.nu")
    }  # the step counter and Adam's count are skipped
