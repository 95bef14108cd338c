"""The fast read over the data server's gRPC stub equals the public ``read_tensors`` path."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from tensorboard import context as tb_context

from tandv_tb.plugin.reading import read_raw
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
