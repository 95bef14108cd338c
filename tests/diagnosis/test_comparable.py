"""Which runs ``divergence`` compares, on real trainings: one model trained with two
learning rates (compared), a JAX model beside a PyTorch one (not compared, though they
share a few tensors), an import of a run (compared through the run it copies)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
import pytest
import torch
from flax import linen as fnn
from torch import nn

import tandv_tb
import tandv_tb.jax
from tests.helpers.findings_cli import cli, cli_json
from tests.helpers.torch_models import train

STEPS = 12


def train_torch(logdir, lr: float) -> None:
    """The README's model in PyTorch: 32 -> 64 -> relu -> 1."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 1))
    train(model, logdir, STEPS, lr=lr, scalars=True)


def train_jax(logdir) -> None:
    """The same shapes in Flax (its own names: Dense_0, ...; the root is also called
    Sequential, and its output has the same size as the PyTorch model's)."""
    model = fnn.Sequential([fnn.Dense(64), fnn.relu, fnn.Dense(1)])
    params = model.init(jax.random.PRNGKey(0), jnp.ones((16, 8)))
    sgd = optax.sgd(1e-2)
    opt_state = sgd.init(params)

    @jax.jit
    def update(params, opt_state, x):
        loss, grads = jax.value_and_grad(lambda p: (model.apply(p, x) ** 2).mean())(params)
        updates, opt_state = sgd.update(grads, opt_state)
        return optax.apply_updates(params, updates), opt_state, grads

    with tandv_tb.jax.track(params, opt_state, logdir=str(logdir)) as tracker:
        for step in range(STEPS):
            x = jax.random.normal(jax.random.PRNGKey(step), (16, 8))
            params, opt_state, grads = tracker.intercept(update, params, opt_state, x)
            tracker.step(params, opt_state, grads)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("comparable")
    train_torch(root / "torch_fast", lr=0.2)
    train_torch(root / "torch_slow", lr=0.001)
    train_jax(root / "jax")
    frame = tandv_tb.read_frame(root / "torch_slow")
    tandv_tb.write_frame(tandv_tb.to_tandv(frame), root / "torch_slow_import")
    return root


def divergences(logdir, **kwargs) -> list[tuple[str, str, int]]:
    found = tandv_tb.findings(logdir, grouped=False, cache_dir=logdir.parent / "cache", **kwargs)
    parted = found[found.kind == "divergence"]
    return [(r.run, r.message.split("'")[3], r.step) for r in parted.itertuples()]


def test_one_model_with_two_learning_rates_is_compared(logdir):
    parted = divergences(logdir)
    assert [(a, b) for a, b, _ in parted] == [("torch_fast", "torch_slow")]
    status, groups = cli_json(logdir, "--fail-on", "warning")
    assert status == 1
    (row,) = [g for g in groups if g["kind"] == "divergence"]
    assert row["run"] == "torch_fast" and "'torch_slow'" in row["message"]


def test_a_jax_and_a_pytorch_model_are_not_compared(logdir):
    """They share a few tensors (the root's output and its gradient), not most: no
    divergence, though asked for by name they do part."""
    assert not [p for p in divergences(logdir) if "jax" in p[:2]]
    asked = divergences(logdir, compare=("jax", "torch_slow"))
    assert [(a, b) for a, b, _ in asked] == [("jax", "torch_slow")]
    done = cli("findings", str(logdir))
    note = done.stdout.splitlines()[-1]
    assert note.startswith("Divergence: compared torch_fast with torch_slow")
    assert "not compared: jax shares under half of its tensors with every other run" in note
    asked = cli("findings", str(logdir), "--compare", "torch_slow", "jax")
    assert "part at step" in asked.stdout and "--compare RUN_A" not in asked.stdout
    assert {line.split()[0] for line in asked.stdout.splitlines()[:2]} == {"jax", "torch_slow"}


def test_an_import_is_compared_through_the_run_it_copies(logdir):
    assert not [p for p in divergences(logdir) if "torch_slow_import" in p[:2]]
    note = cli("findings", str(logdir)).stdout.splitlines()[-1]
    assert "torch_slow_import holds the same values as torch_slow (compared through it)" in note
    # alone with the other run, the import is compared (nothing else stands for it)
    asked = divergences(logdir, compare=("torch_fast", "torch_slow_import"))
    assert [(a, b) for a, b, _ in asked] == [("torch_fast", "torch_slow_import")]
    assert asked[0][2] == divergences(logdir)[0][2]  # where the original parts
