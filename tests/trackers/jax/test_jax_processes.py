"""``tandv_tb.jax.track`` under ``jax.distributed``: two CPU processes (two devices each, gloo
collectives) record exactly what one process with four devices records for the same global
arrays, and only process 0 writes.

Every run is a subprocess: jax fixes its devices and processes when first used.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.helpers.jax_models import assert_same, read_records

pytestmark = pytest.mark.distributed

TIMEOUT = 240  # seconds for a whole run; a hung collective fails the test instead

SCRIPT = r"""
import sys
import jax

port, process, logdir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
jax.config.update("jax_platforms", "cpu")
if process >= 0:
    jax.config.update("jax_num_cpu_devices", 2)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=process
    )
else:
    jax.config.update("jax_num_cpu_devices", 4)

import jax.numpy as jnp, optax
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
from tandv_tb.jax import track
from tests.helpers.jax_models import MLP, mlp_batch, mlp_loss

assert jax.device_count() == 4
model = MLP()
optimizer = optax.adam(1e-2)
# "data" runs across the processes, "model" within each.
mesh = jax.make_mesh((2, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)


def place(leaf):
    if leaf.shape == (16, 4):
        return jax.device_put(leaf, NamedSharding(mesh, P("data", None)))  # across processes
    if leaf.ndim == 2 and leaf.shape[1] == 16:
        return jax.device_put(leaf, NamedSharding(mesh, P(None, "model")))
    return jax.device_put(leaf, NamedSharding(mesh, P()))


@jax.jit
def update(params, opt_state, batch):
    grads = jax.grad(lambda p: mlp_loss(model, p, batch))(params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, grads


params = jax.tree.map(place, jax.jit(model.init)(jax.random.PRNGKey(0), jnp.zeros((1, 6))))
opt_state = jax.tree.map(place, optimizer.init(params))
with track(params, opt_state, logdir=logdir, track_inputs=True) as tracker:
    for step in range(2):
        batch = tuple(jax.device_put(a, NamedSharding(mesh, P("data"))) for a in mlp_batch(step))
        params, opt_state, grads = tracker.intercept(update, params, opt_state, batch)
        tracker.step(params, opt_state, grads)
        # The shardings given at first: the next step reuses the compiled program.
        params, opt_state = jax.tree.map(place, (params, opt_state))
    assert (tracker.logdir is None) == (process > 0)
assert process < 0 or not params["params"]["out"]["kernel"].is_fully_addressable
print("finished", process)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(port: int, process: int, logdir: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(port), str(process), str(logdir)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(processes: list[subprocess.Popen]) -> None:
    """Wait for every process (killing all on a timeout); each must end cleanly."""
    outputs = []
    try:
        for process in processes:
            outputs.append(process.communicate(timeout=TIMEOUT)[0])
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output[-4000:]


def test_two_processes_record_the_single_process_statistics(tmp_path):
    port = free_port()
    logdirs = [tmp_path / "process0", tmp_path / "process1"]
    finish([start(port, i, logdirs[i]) for i in (0, 1)])
    finish([start(0, -1, tmp_path / "single")])

    assert not logdirs[1].exists()  # process 1 writes nothing
    distributed = read_records(str(logdirs[0]))
    single = read_records(str(tmp_path / "single"))
    assert distributed.keys() == single.keys()
    types = {t for _, t, _ in single}
    assert {"Activation", "Gradient", "Input", "Input_Gradient", "Weight"} <= types
    for key, want in single.items():
        got = distributed[key]
        assert_same(got.record, want.record)
        assert got.order == want.order and got.module_type == want.module_type
    # The kernel split across the processes is described whole.
    assert distributed["out.kernel", "Weight", 1].record.numel == 16 * 4
    assert distributed["inp", "Input", 0].record.numel == 8 * 6  # the global batch
