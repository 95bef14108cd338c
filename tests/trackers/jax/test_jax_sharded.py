"""``tandv_tb.jax.track`` on 4 (simulated) devices: records describe the global arrays.

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


def check(logdir, axis_type):
    mesh = jax.make_mesh((2, 2), ("data", "model"), axis_types=(axis_type, axis_type))
    params = jax.jit(model.init)(jax.random.PRNGKey(0), jnp.zeros((1, 6)))
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
            x, y = (jax.device_put(a, NamedSharding(mesh, P("data"))) for a in mlp_batch(0))
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
    print("checked", axis_type.name, len(records), "records")


check(sys.argv[1] + "/auto", AxisType.Auto)
check(sys.argv[1] + "/explicit", AxisType.Explicit)
"""


@pytest.mark.slow
def test_sharded_records_describe_the_global_arrays(tmp_path):
    """Data- and model-parallel, with automatic and with explicit sharding (the latter
    under ``jax.set_mesh``), in one subprocess."""
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
