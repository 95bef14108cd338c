"""``on_nonfinite``: the JAX tracker acts on the first NaN/Inf of a real small Flax training
under ``jax.jit``, on tracked and untracked steps; read back from disk."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen

import tandv_tb
from tandv_tb import NonFiniteError, NonFiniteWarning
from tandv_tb.event_files.nonfinite import read_nonfinite
from tandv_tb.jax import track

POISONED_STEP = 7
STEPS = 10
BATCH = 4


class Scaled(linen.Module):
    """A dense layer whose output is multiplied by ``factor`` (inf at the poisoned step)."""

    @linen.compact
    def __call__(self, x, factor):
        return linen.Dense(6)(x) * factor


class Model(linen.Module):
    @linen.compact
    def __call__(self, x, factor):
        x = jnp.tanh(linen.Dense(6, name="inp")(x))
        x = Scaled(name="hidden")(x, factor)
        return linen.Dense(1, name="out")(x)


MODEL = Model()
OPTIMIZER = optax.adam(1e-2)


@jax.jit
def update(params, opt_state, x, factor):
    def loss_fn(p):
        return jnp.mean(MODEL.apply(p, x, factor) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = OPTIMIZER.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, grads, loss


def _bits(tree) -> list[bytes]:
    return [np.asarray(leaf).tobytes() for leaf in jax.tree_util.tree_leaves(tree)]


def _train(logdir, tracked=True, **options):
    """Train with ``hidden``'s output multiplied by inf at ``POISONED_STEP``; the reports,
    the losses, the state before the poisoned step and after, and the error raised."""
    params = MODEL.init(jax.random.PRNGKey(0), jnp.zeros((BATCH, 6)), 1.0)
    opt_state = OPTIMIZER.init(params)
    reports, losses, before, error = [], [], None, None
    tracker = track(params, opt_state, logdir=str(logdir), **options) if tracked else None
    try:
        for step in range(STEPS):
            x = jax.random.normal(jax.random.PRNGKey(step), (BATCH, 6))
            factor = jnp.float32(jnp.inf if step == POISONED_STEP else 1.0)
            if step == POISONED_STEP:
                before = _bits((params, opt_state))
            if tracker is None:
                params, opt_state, grads, loss = update(params, opt_state, x, factor)
                losses.append(np.asarray(loss).tobytes())
                continue
            params, opt_state, grads, loss = tracker.intercept(update, params, opt_state, x, factor)
            reports.append(tracker.step(params, opt_state, grads))
            losses.append(np.asarray(loss).tobytes())
    except NonFiniteError as raised:
        error = raised
    if tracker is not None:
        tracker.close()
    return reports, losses, before, _bits((params, opt_state)), error


@pytest.mark.parametrize("every", [1, 10], ids=["tracked", "untracked"])
def test_raise_stops_before_the_new_state_is_handed_back(tmp_path, every):
    reports, _, before, after, error = _train(tmp_path, every=every, on_nonfinite="raise")
    assert error is not None, "no NonFiniteError"
    report = error.report
    assert (report.step, report.tensor_type, report.name) == (POISONED_STEP, "Activation", "hidden")
    assert report.direction == "forward" and report.nan + report.posinf + report.neginf > 0
    assert len(reports) == POISONED_STEP and not any(r.nonfinite for r in reports)
    assert before == after  # the weights and optimizer state of the last good step
    (stopped,) = read_nonfinite(tmp_path)
    assert stopped.step == POISONED_STEP and stopped.stopped
    found = tandv_tb.findings(tmp_path)
    first = found[found.kind == "nonfinite"].iloc[0]
    assert first.step == POISONED_STEP and "training was stopped" in first.message


def test_record_reports_and_changes_nothing(tmp_path):
    reports, losses, _, after, error = _train(tmp_path / "tracked", every=10)
    _, plain_losses, _, plain_after, _ = _train(tmp_path / "plain", tracked=False)
    assert error is None and len(reports) == STEPS
    assert not any(r.nonfinite for r in reports[:POISONED_STEP])
    poisoned = reports[POISONED_STEP]
    assert (poisoned.step, poisoned.name) == (POISONED_STEP, "hidden")
    assert poisoned.direction == "forward"
    assert losses == plain_losses and after == plain_after


def test_warn_once_and_a_callable(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reports, *_ = _train(tmp_path / "warn", every=10, on_nonfinite="warn")
    ours = [w for w in caught if issubclass(w.category, NonFiniteWarning)]
    assert len(ours) == 1 and "'hidden'" in str(ours[0].message)
    assert ours[0].filename == __file__
    assert sum(r.nonfinite for r in reports) > 1
    seen = []
    _train(tmp_path / "callable", every=10, on_nonfinite=seen.append)
    assert [r.step for r in seen][0] == POISONED_STEP and seen[0].name == "hidden"


def test_bad_policies_are_refused(tmp_path):
    with pytest.raises(ValueError, match="'record', 'warn', 'raise'"):
        track(logdir=str(tmp_path), on_nonfinite=3)
    with pytest.raises(ValueError, match="watch_nonfinite=True"):
        track(logdir=str(tmp_path), on_nonfinite="warn", watch_nonfinite=False)
