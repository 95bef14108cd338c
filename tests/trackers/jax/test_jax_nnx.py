"""``tandv_tb.jax.track`` with Flax NNX: an ``nnx.Module`` and an ``nnx.Optimizer``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from tandv_tb.jax import track
from tests.helpers.jax_models import NnxMLP, assert_same, expected, mlp_batch, read_records

NAMES = ["first", "norm", "last", "NnxMLP"]


def _step(model, optimizer, x, y):
    def loss_fn(model):
        return jnp.mean((model(x) - y[:, :3]) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss, grads


def _outputs(model, x):
    """Each module's output, computed by hand (eagerly)."""
    first = model.first(x)
    norm = model.norm(jax.nn.relu(first))
    last = model.last(norm)
    return {"first": first, "norm": norm, "last": last, "NnxMLP": last}


@pytest.fixture(scope="module", params=["nnx.jit", "eager"])
def nnx_run(request, tmp_path_factory):
    model = NnxMLP(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    step_fn = nnx.jit(_step) if request.param == "nnx.jit" else _step
    logdir = str(tmp_path_factory.mktemp("nnx"))
    seen = []
    with track(model_state=model, optimizer_state=optimizer, logdir=logdir) as tracker:
        for step in range(2):
            x, y = mlp_batch(step)
            before = _outputs(nnx.clone(model), x)
            _, grads = tracker.intercept(step_fn, model, optimizer, x, y)
            tracker.step(grads=grads)  # the model and optimizer are read in place
            seen.append((before, nnx.state(model), nnx.state(optimizer, nnx.OptState), grads))
    return request.param, read_records(logdir), seen


def test_nnx_records_every_tensor_type_by_module_path(nnx_run):
    _, records, _ = nnx_run
    by_type: dict[str, set] = {}
    for name, tensor_type, step in records:
        if step == 1:
            by_type.setdefault(tensor_type, set()).add(name)
    parameters = {f"{m}.{p}" for m in ("first", "last") for p in ("kernel", "bias")}
    parameters |= {"norm.scale", "norm.bias"}
    assert by_type == {
        "Activation": set(NAMES),
        "Gradient": set(NAMES),
        "Weight": parameters,
        "Weight_Gradient": parameters,
        "Optimiser_State.mu": parameters,
        "Optimiser_State.nu": parameters,
    }  # the optimizer's step and Adam's count are skipped
    assert records["norm", "Activation", 0].module_type == "LayerNorm"
    assert records["first.kernel", "Weight", 0].module_type == "Linear"
    orders = {n: records[n, "Activation", 0].order for n in NAMES}
    assert sorted(NAMES, key=orders.get) == NAMES  # by first execution


def test_nnx_state_records_equal_the_engine(nnx_run):
    _, records, seen = nnx_run
    _, state, opt_state, grads = seen[1]
    adam = opt_state["opt_state"][0]
    for module, leaf in [("first", "kernel"), ("norm", "scale"), ("last", "bias")]:
        name = f"{module}.{leaf}"
        for tensor_type, tree in [
            ("Weight", state),
            ("Weight_Gradient", grads),
            ("Optimiser_State.mu", adam["mu"]),
            ("Optimiser_State.nu", adam["nu"]),
        ]:
            want = expected(np.asarray(tree[module][leaf][...]))
            assert_same(records[name, tensor_type, 1].record, want, rtol=0)


def test_nnx_activations_equal_the_engine(nnx_run):
    mode, records, seen = nnx_run
    for step, (outputs, *_) in enumerate(seen):
        for name, value in outputs.items():
            got = records[name, "Activation", step].record
            if mode == "eager":  # the same eager operations: the very same arrays
                assert_same(got, expected(value))
            else:  # compiled by XLA: equal up to rounding
                assert got.numel == value.size
                np.testing.assert_allclose(
                    [got.statistics[k] for k in ("mean_abs", "rm2", "max_abs")],
                    [float(f(np.abs(np.asarray(value)))) for f in (np.mean, _rms, np.max)],
                    rtol=1e-5,
                )


def _rms(values):
    return np.sqrt(np.mean(np.square(values, dtype=np.float64)))
