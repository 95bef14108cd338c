"""What this jax can do for the tracker, found by feature detection
(``tandv_tb.jax.features``, ``tandv_tb.stats._xla_cpu``), and ``intercept`` called where it
cannot work.

`make compat` runs this file on the floor and the newest jax.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import jaxlib
import optax
import pytest
from packaging.version import Version

from tandv_tb import versions
from tandv_tb.jax import track
from tests.helpers.jax_models import MLP, mlp_batch, mlp_loss

MODEL = MLP()


def _params():
    return MODEL.init(jax.random.PRNGKey(0), jnp.zeros((1, 6)))


def _update(optimizer):
    def update(params, opt_state, batch):
        loss, grads = jax.value_and_grad(lambda p: mlp_loss(MODEL, p, batch))(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, grads, loss

    return update


def test_intercept_inside_a_jitted_function_says_where_it_goes(tmp_path):
    params = _params()
    with track(model_state=params, logdir=str(tmp_path)) as tracker:

        @jax.jit
        def step(params, batch):
            return tracker.intercept(lambda p, b: mlp_loss(MODEL, p, b), params, batch)

        with pytest.raises(RuntimeError, match=r"call it outside, on the jitted function"):
            step(params, mlp_batch(0))


def test_a_jitted_step_is_tracked_and_an_older_jaxlib_says_once_what_its_kernel_lacks(
    tmp_path, monkeypatch
):
    """Under jax.jit the statistics come from the CPU kernel (an XLA FFI call) where jaxlib
    has its FFI API (0.10 and later); before, the array kernel computes them and one
    ``NewerReleaseWarning`` says so. Training is the same with and without the tracker."""
    monkeypatch.setattr(versions, "_said", set())
    optimizer = optax.adam(1e-2)
    update = jax.jit(_update(optimizer))

    def train(logdir):
        params = _params()
        opt_state = optimizer.init(params)
        if logdir is None:
            for step in range(3):
                params, opt_state, _, _ = update(params, opt_state, mlp_batch(step))
            return params
        with track(model_state=params, optimizer_state=opt_state, logdir=logdir) as tracker:
            for step in range(3):
                params, opt_state, grads, _ = tracker.intercept(
                    update, params, opt_state, mlp_batch(step)
                )
                tracker.step(params, opt_state, grads)
        return params

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tracked = train(str(tmp_path))
    said = [str(w.message) for w in caught if w.category is versions.NewerReleaseWarning]
    for got, want in zip(jax.tree.leaves(tracked), jax.tree.leaves(train(None))):
        assert bool((got == want).all())
    if Version(jaxlib.__version__).release >= (0, 10):
        assert said == []
    else:
        assert len(said) == 1, said
        assert "needs jaxlib 0.10 or later" in said[0]
