"""The watch's compiled variant of a jitted forward pass, not differentiated: the same
outputs bit for bit, and exact counts of each module output."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen

from tandv_tb.event_files.nonfinite import NonfiniteEntry, read_nonfinite
from tandv_tb.jax import track


class Two(linen.Module):
    @linen.compact
    def __call__(self, x):
        return linen.Dense(4, name="b")(jnp.tanh(linen.Dense(6, name="a")(x)))


def test_a_jitted_forward_pass_is_unchanged_and_counted_exactly(tmp_path):
    model = Two()
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((3, 5)))
    apply = jax.jit(model.apply)
    x = jax.random.normal(jax.random.PRNGKey(1), (3, 5))
    poisoned = x.at[1, 2].set(jnp.nan)
    with track(logdir=str(tmp_path), every=100) as tracker:
        for batch in (x, x, poisoned):
            out = tracker.intercept(apply, params, batch)
            assert np.asarray(out).tobytes() == np.asarray(apply(params, batch)).tobytes()
            tracker.step()
    found = read_nonfinite(tmp_path)
    assert [s.step for s in found] == [2]
    hidden = np.asarray(params["params"]["a"]["kernel"]).T @ np.asarray(poisoned, np.float64).T
    assert list(found[0].entries) == [
        NonfiniteEntry("Activation", "a", int(np.isnan(hidden).sum()), 0, 0),
        NonfiniteEntry("Activation", "b", 4, 0, 0),
        NonfiniteEntry("Activation", "Two", 4, 0, 0),
    ]


def test_a_batch_given_to_a_module_is_watched_with_track_inputs(tmp_path):
    """The batch is not differentiated under ``jax.grad``: its counts are computed once
    the jitted function has run (the watch crashed here before)."""
    model = linen.Dense(3)
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((2, 4)))

    @jax.jit
    def gradient(params, x):
        return jax.grad(lambda p: jnp.sum(model.apply(p, x) ** 2))(params)

    with track(logdir=str(tmp_path), every=100, track_inputs=True) as tracker:
        for step in range(3):
            x = jnp.ones((2, 4)).at[0, 1].set(jnp.nan if step == 2 else 1.0)
            tracker.intercept(gradient, params, x)
            tracker.step()
    found = read_nonfinite(tmp_path)
    assert [s.step for s in found] == [2]
    # one NaN in the batch; the whole first row of the output and of its cotangent
    assert list(found[0].entries) == [
        NonfiniteEntry("Input", "Dense", 1, 0, 0),
        NonfiniteEntry("Activation", "Dense", 3, 0, 0),
        NonfiniteEntry("Gradient", "Dense", 3, 0, 0),
    ]
