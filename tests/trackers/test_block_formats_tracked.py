"""Block-scaled formats through the trackers: the names are taken, and what is written
equals the engine's statistics of the same tensors (blocks along their last dimension)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch

from tandv_tb.jax import track as jax_track
from tandv_tb.stats import tensor_stats
from tandv_tb.torch import track as torch_track
from tests.helpers.tracker_records import read_records

FORMATS = ("float8_e4m3fn", "mxfp4_e2m1", "nvfp4", "mxfp8_e4m3:rceil")
BLOCKS = FORMATS[1:]


def test_torch_tracker_records_the_block_formats_of_every_tensor(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(40, 48), torch.nn.ReLU(), torch.nn.Linear(48, 5))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # weights stay as they are
    with torch_track(model, logdir=tmp_path, optimizer=optimizer, formats=FORMATS) as tracker:
        loss = model(torch.randn(7, 40)).square().mean()
        loss.backward()
        optimizer.step()
        tracker.step()
    records = read_records(str(tmp_path))
    for name, parameter in model.named_parameters():
        got = records[(name, "Weight", 0)]
        assert got.formats == ("float8_e4m3fn",)
        want = tensor_stats(parameter.detach(), FORMATS).to_record()
        assert set(got.record.blocks) == set(BLOCKS)
        for block in BLOCKS:
            mine, theirs = got.record.blocks[block], want.blocks[block]
            assert mine == theirs, (name, block)
    activation = records[("0", "Activation", 0)].record
    assert activation.blocks["nvfp4"].blocks == 7 * 3  # rows of 48: three blocks of 16


def test_jax_tracker_records_the_block_formats_under_jit(tmp_path):
    params = {"w": jax.random.normal(jax.random.PRNGKey(0), (24, 40)), "b": jnp.zeros(40)}
    optimizer = optax.sgd(0.0)
    opt_state = optimizer.init(params)

    @jax.jit
    def update(params, opt_state, x):
        grads = jax.grad(lambda p: jnp.mean(jnp.tanh(x @ p["w"] + p["b"]) ** 2))(params)
        updates, opt_state = optimizer.update(grads, opt_state)
        return optax.apply_updates(params, updates), opt_state, grads

    with jax_track(params, opt_state, logdir=tmp_path, formats=FORMATS) as tracker:
        x = jax.random.normal(jax.random.PRNGKey(1), (3, 24))
        params, opt_state, grads = update(params, opt_state, x)
        tracker.step(params, opt_state, grads)
    records = read_records(str(tmp_path))
    weight = records[("w", "Weight", 0)].record
    want = tensor_stats(np.asarray(params["w"]), FORMATS).to_record()
    for block in BLOCKS:
        assert weight.blocks[block] == want.blocks[block], block
