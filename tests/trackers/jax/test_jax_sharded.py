"""``tandv_tb.jax.track`` on 4 (simulated) devices: records describe the global arrays,
once each, as the same model's on one device does.

Runs in a subprocess: the device count is fixed when jax is first imported, and this test
process has already imported jax with one device.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import REPO

SCRIPT = r"""
import sys, warnings
import jax, jax.numpy as jnp, numpy as np, optax
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
from tandv_tb.jax import track
from tests.helpers.jax_models import (
    MLP, assert_same, expected, mlp_batch, mlp_loss, output_shapes, read_records, sgd_update,
)

assert jax.device_count() == 4, jax.devices()
model = MLP()
loss = lambda p, batch: mlp_loss(model, p, batch)
optimizer = optax.adam(1e-2)


def on_grid(tree):
    # Values on a grid of quarters: the first layers' sums are exact in any order, so the
    # sharded runs hold the very values of the run on one device there.
    return jax.tree.map(lambda a: jnp.round(a * 4) / 4, tree)


def start():
    return on_grid(jax.jit(model.init)(jax.random.PRNGKey(0), jnp.zeros((1, 6))))


def unsharded(logdir):
    # The same step on one device: the records and arrays the sharded runs' are compared with.
    params = start()
    opt_state = optimizer.init(params)
    update = jax.jit(sgd_update(loss, optimizer, output_shapes(loss, params, mlp_batch(0))))
    with track(model_state=params, optimizer_state=opt_state, logdir=logdir) as tracker:
        params, opt_state, grads, (outputs, cotangents) = tracker.intercept(
            update, params, opt_state, on_grid(mlp_batch(0))
        )
        tracker.step(params, opt_state, grads)
    return read_records(logdir), {**outputs}, {**cotangents}


def same_as_unsharded(records, held, one_device):
    # Names, tensor types, steps and numel equal to the run on one device; counts, bins and
    # extremes exact where the values (held: outputs and cotangents) are the same, and the
    # moments within 1e-6 (a few float32 ulps: the sharded program adds its shards' partial
    # sums in another order, which moved rm8 by one ulp on a 2-core Xeon, 2026-12-07);
    # else rm2 within 1e-4. Returns how many held the same values.
    theirs, outputs, cotangents = one_device
    assert sorted(records) == sorted(theirs)
    same = 0
    for key, stored in records.items():
        reference = theirs[key].record
        assert stored.record.numel == reference.numel, key
        name, tensor_type, _ = key
        arrays = {"Activation": outputs, "Gradient": cotangents}.get(tensor_type)
        if arrays is not None and all(
            np.array_equal(a, b) for a, b in zip(arrays[name], held[tensor_type][name])
        ):
            same += 1
            assert_same(stored.record, reference, rtol=1e-6)
        else:
            rm2 = reference.statistics["rm2"]
            np.testing.assert_allclose(stored.record.statistics["rm2"], rm2, rtol=1e-4)
    return same


def check(logdir, axis_type):
    mesh = jax.make_mesh((2, 2), ("data", "model"), axis_types=(axis_type, axis_type))
    params = start()
    shapes = output_shapes(loss, params, mlp_batch(0))

    # Data parallel, and the hidden layers' kernels split over the "model" axis.
    def place(leaf):
        spec = P(None, "model") if leaf.ndim == 2 and leaf.shape[1] == 16 else P()
        return jax.device_put(leaf, NamedSharding(mesh, spec))

    params = jax.tree.map(place, params)
    opt_state = optimizer.init(params)
    update = jax.jit(sgd_update(loss, optimizer, shapes))
    explicit = axis_type == AxisType.Explicit
    with jax.set_mesh(mesh) if explicit else warnings.catch_warnings():
        with track(model_state=params, optimizer_state=opt_state, logdir=logdir) as tracker:
            batch = on_grid(mlp_batch(0))
            x, y = (jax.device_put(a, NamedSharding(mesh, P("data"))) for a in batch)
            params, opt_state, grads, (outputs, cotangents) = tracker.intercept(
                update, params, opt_state, (x, y)
            )
            tracker.step(params, opt_state, grads)

    assert len(params["params"]["inp"]["kernel"].sharding.device_set) == 4
    assert not outputs["inp"][0].sharding.is_fully_replicated  # the activations are sharded
    records = read_records(logdir)
    for name, calls in outputs.items():
        assert_same(records[name, "Activation", 0].record, expected(calls))
        assert_same(records[name, "Gradient", 0].record, expected(cotangents[name]))
        assert records[name, "Activation", 0].record.numel == sum(c.size for c in calls)
    for module, leaf in [("inp", "kernel"), ("shared", "kernel"), ("norm", "scale")]:
        for tensor_type, tree in [("Weight", params), ("Weight_Gradient", grads)]:
            want = expected(np.asarray(tree["params"][module][leaf]))
            assert_same(records[f"{module}.{leaf}", tensor_type, 0].record, want, rtol=0)
        want = expected(np.asarray(opt_state[0].nu["params"][module][leaf]))
        assert_same(records[f"{module}.{leaf}", "Optimiser_State.nu", 0].record, want, rtol=0)
    held = {"Activation": outputs, "Gradient": cotangents}
    same = same_as_unsharded(records, held, one_device)
    print("checked", axis_type.name, len(records), "records,", same, "the same as unsharded")


one_device = unsharded(sys.argv[1] + "/unsharded")


check(sys.argv[1] + "/auto", AxisType.Auto)
check(sys.argv[1] + "/explicit", AxisType.Explicit)
"""


@pytest.mark.slow
def test_sharded_records_describe_the_global_arrays(tmp_path):
    """Data- and model-parallel, with automatic and with explicit sharding (the latter
    under ``jax.set_mesh``), in one subprocess; each against the same step on one device
    (names, ``numel``, counts where the values are the same)."""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "checked Auto" in result.stdout and "checked Explicit" in result.stdout
    assert "records, 0 the same" not in result.stdout  # some counts compared exactly
