"""The JAX watch takes the counts of the arrays given to ``step()`` from the watched
compiled call when they are its outputs, and counts other arrays itself: both give the
same exact entries."""

from __future__ import annotations

import gc
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen

import tandv_tb.jax.watch as watch_module
from tandv_tb.event_files.nonfinite import NonfiniteEntry, read_nonfinite
from tandv_tb.jax import track

NAN, INF = float("nan"), float("inf")
MODEL = linen.Dense(4)
COUNTS_OF = watch_module._counts_of  # the second program, which a spy wraps


def _train(logdir, copy_outputs: bool, monkeypatch) -> list[int]:
    """Three steps; at step 2 the update writes NaN, +Inf and -Inf into the kernel it
    returns. Returns how many arrays the second program counted at each step()."""
    counted = []

    def spy(arrays):
        counted.append(len(arrays))
        return COUNTS_OF(arrays)

    monkeypatch.setattr(watch_module, "_counts_of", spy)
    optimizer = optax.sgd(0.1)
    params = MODEL.init(jax.random.PRNGKey(0), jnp.zeros((2, 3)))
    opt_state = optimizer.init(params)
    bad = jnp.asarray([[NAN, INF, -INF, INF], [1.0, NAN, 0.0, 2.0], [3.0, 4.0, 5.0, -INF]])

    @jax.jit
    def update(params, opt_state, x, poison):
        loss, grads = jax.value_and_grad(lambda p: jnp.mean(MODEL.apply(p, x) ** 2))(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        kernel = params["params"]["kernel"]
        params["params"]["kernel"] = jnp.where(poison, bad, kernel)
        return params, opt_state, grads, loss

    with track(params, opt_state, logdir=str(logdir), every=100) as tracker:
        for step in range(3):
            x = jax.random.normal(jax.random.PRNGKey(step), (2, 3))
            params, opt_state, grads, _ = tracker.intercept(
                update, params, opt_state, x, jnp.asarray(step == 2)
            )
            given = (params, opt_state, grads)
            if copy_outputs:  # the same values, not the call's arrays
                given = jax.tree_util.tree_map(jnp.copy, given)
            counted.append(-1)  # marks a step()
            tracker.step(*given)
    return counted


def test_outputs_counted_in_the_program_and_copies_counted_apart_agree(tmp_path, monkeypatch):
    in_program = _train(tmp_path / "outputs", False, monkeypatch)
    apart = _train(tmp_path / "copies", True, monkeypatch)
    # step 0 is tracked; at steps 1 and 2 the outputs need no second program
    assert in_program == [-1, -1, -1]
    assert apart == [-1, -1, 4, -1, 4]  # kernel, bias and their gradients (SGD keeps none)
    found = read_nonfinite(tmp_path / "outputs")
    assert found == read_nonfinite(tmp_path / "copies")
    assert [s.step for s in found] == [2]
    want = NonfiniteEntry("Weight", "kernel", 2, 2, 2)
    assert list(found[0].entries) == [want]
    kernel = np.asarray(
        [[NAN, INF, -INF, INF], [1.0, NAN, 0.0, 2.0], [3.0, 4.0, 5.0, -INF]], np.float32
    )
    assert (want.nan, want.posinf, want.neginf) == (
        int(np.isnan(kernel).sum()),
        int(np.isposinf(kernel).sum()),
        int(np.isneginf(kernel).sum()),
    )


def test_outputs_the_user_drops_are_not_kept_until_step(tmp_path):
    @jax.jit
    def double(x):
        return x * 2

    with track(logdir=str(tmp_path), every=100) as tracker:
        tracker.intercept(double, jnp.ones(3))
        tracker.step()  # step 0 is tracked
        dropped = weakref.ref(tracker.intercept(double, jnp.ones(3)))
        gc.collect()
        assert dropped() is None
        tracker.step()
