"""The fast read over the data server's gRPC stub equals the public ``read_tensors`` path."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from tensorboard import context as tb_context
from tensorboard.util import tensor_util

from tandv_tb import summary
from tandv_tb.plugin.reading import RawSeries, _gather, from_arrays, read_raw
from tests.plugin_helpers import TensorBoardApp, write_logdir


class PublicApiOnly:
    """The same real provider, seen only through its public ``read_tensors``."""

    def __init__(self, provider):
        self.read_tensors = provider.read_tensors


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("reading")
    write_logdir(root, steps=15)
    app = TensorBoardApp(root, "rust")
    app.wait_for(tags=32, max_step=14)
    yield app
    app.close()


def test_the_data_server_provider_has_the_stub_the_fast_path_uses(server):
    assert hasattr(server.provider, "_stub") and hasattr(server.provider._stub, "ReadTensors")


def test_fast_and_public_reads_agree(server, caplog):
    ctx = tb_context.RequestContext()
    listing = server.provider.list_tensors(ctx, experiment_id="", plugin_name="tandv")
    tags = sorted(listing["alpha"])
    with caplog.at_level(logging.WARNING, logger="tandv_tb.plugin.reading"):
        fast = read_raw(server.provider, ctx, "", "tandv", "alpha", tags)
    assert not caplog.records  # the fast path did not fall back
    public = read_raw(PublicApiOnly(server.provider), ctx, "", "tandv", "alpha", tags)
    assert sorted(fast) == sorted(public) == tags
    for tag in tags:
        a, b = fast[tag], public[tag]
        for field in ("steps", "wall_times", "lengths", "flat"):
            assert np.array_equal(getattr(a, field), getattr(b, field)), (tag, field)


def test_unknown_tags_and_runs_are_left_out(server):
    ctx = tb_context.RequestContext()
    assert read_raw(server.provider, ctx, "", "tandv", "alpha", ["tandv/Nope/x"]) == {}
    assert read_raw(server.provider, ctx, "", "tandv", "nope", ["tandv/Activation/embed"]) == {}


def _public(values) -> RawSeries:
    """What the public path makes of the same steps: ``make_ndarray`` of each, refused
    ones marked."""
    arrays = []
    for value in values:
        try:
            arrays.append(tensor_util.make_ndarray(value))
        except ValueError:
            arrays.append(np.zeros((0, 0)))
    return from_arrays(list(range(len(values))), [0.0] * len(values), arrays)


@pytest.mark.parametrize("damage", ["none", "shape_too_long", "shape_2d", "cut_off", "int64_step"])
def test_the_one_pass_gather_equals_step_by_step_reading(damage):
    """Varint steps are joined and decoded at once; a step whose shape does not match its
    bytes, whose last varint is cut off, or of another dtype sends the whole tag down the
    step-by-step path, which marks only that step."""
    rng = np.random.default_rng(0)
    vectors = [rng.integers(-(2**40), 2**40, rng.integers(1, 30)) for _ in range(20)]
    values = [summary.tensor_proto(v) for v in vectors]
    bad = values[7]
    if damage == "shape_too_long":
        bad.tensor_shape.dim[0].size += 1
    elif damage == "shape_2d":
        bad.tensor_shape.dim.add(size=1)
    elif damage == "cut_off":
        bad.tensor_content = bad.tensor_content[:-1] + b"\x80"
    elif damage == "int64_step":
        values[7] = tensor_util.make_tensor_proto(vectors[7].astype(np.int64))
    got = _gather(list(range(20)), [0.0] * 20, values)
    want = _public(values)
    for field in ("steps", "lengths", "flat"):
        assert np.array_equal(getattr(got, field), getattr(want, field)), field
    assert (got.lengths == -1).sum() == (damage not in ("none", "int64_step"))
