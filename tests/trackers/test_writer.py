"""NumericsWriter: input checks, event files, user writers, flushing and crashes."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
import weakref
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
import tensorboardX
import torch
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.context import RequestContext
from tensorboard.data import server_ingester
from tensorboard.util import grpc_util
from torch.utils.tensorboard import SummaryWriter

from tandv_tb import writer as writer_module
from tandv_tb.event_files.metadata import PLUGIN_NAME, TagInfo
from tandv_tb.event_files.record_columns import decode_tensor
from tandv_tb.frame import DataWarning, read_records
from tandv_tb.writer import NumericsWriter
from tests.helpers import REPO
from tests.helpers.event_io import event_files, record_of, stored
from tests.helpers.reference import crafted, random_binades

_RECORD = (
    "from tandv_tb.event_files.record import STATISTICS, NumericsRecord\n"
    "record = NumericsRecord('float32', 8, 0, 0, 0, 0, 0, np.array([8]),"
    " dict.fromkeys(STATISTICS, 1.0))\n"
)


def _records(logdir) -> list:
    """(run, tag info, step, record) for everything under logdir, failing on any warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        return list(read_records(logdir))


def _provider(logdir: Path) -> data_provider.MultiplexerDataProvider:
    """TensorBoard's own data provider over the logdir (keeping every step)."""
    mux = plugin_event_multiplexer.EventMultiplexer(tensor_size_guidance={PLUGIN_NAME: 100_000})
    mux.AddRunsFromDirectory(str(logdir))
    mux.Reload()
    return data_provider.MultiplexerDataProvider(mux, str(logdir))


# ------------------------------------------------------------------ construction


def test_needs_exactly_one_destination(tmp_path):
    with pytest.raises(ValueError, match="exactly one"):
        NumericsWriter()
    with SummaryWriter(tmp_path) as user, pytest.raises(ValueError, match="exactly one"):
        NumericsWriter(tmp_path, writer=user)


@pytest.mark.parametrize("writer", [object(), "logs", open])
def test_refuses_other_writers(writer):
    with pytest.raises(TypeError, match="SummaryWriter"):
        NumericsWriter(writer=writer)


def test_refuses_unknown_formats(tmp_path):
    with pytest.raises(ValueError, match="float7_e9"):
        NumericsWriter(tmp_path, formats=("float8_e4m3fn", "float7_e9"))
    assert event_files(tmp_path) == []


# ----------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("tensor", "named"),
    [
        (None, "None"),
        ("abc", "'abc'"),
        (b"abc", "b'abc'"),
        (3.5, "float"),
        ([1.0, 2.0], "list"),
        (np.arange(4), "int64"),
        (np.ones(3, dtype=bool), "bool"),
        (np.ones(3, dtype=np.complex64), "complex64"),
        (torch.arange(4), "torch.int64"),
        (torch.ones(3, dtype=torch.bool), "torch.bool"),
        (torch.ones(3, dtype=torch.complex64), "torch.complex64"),
        (torch.ones(3, device="meta"), "meta tensor"),
        (jnp.arange(3), "int32"),
    ],
)
def test_add_numerics_refuses_non_float_input(tmp_path, tensor, named):
    with NumericsWriter(tmp_path) as writer, pytest.raises(TypeError) as info:
        writer.add_numerics("x", tensor, 0)
    assert named in str(info.value)


def test_add_numerics_checks_name_step_and_tensor_type(tmp_path):
    x = np.ones(3, np.float32)
    with NumericsWriter(tmp_path) as writer:
        with pytest.raises(ValueError, match="tensor_type"):
            writer.add_numerics("x", x, 0, tensor_type="Weights")
        with pytest.raises(ValueError, match=">= 0"):
            writer.add_numerics("x", x, -1)
        for step in (1.0, "1", True, None):
            with pytest.raises(TypeError, match="step must be an int"):
                writer.add_numerics("x", x, step)
        with pytest.raises(TypeError, match="name"):
            writer.add_numerics("", x, 0)
        with pytest.raises(TypeError, match="NumericsRecord"):
            writer.add_record("x", {"numel": 3}, 0)
    assert _records(tmp_path) == []


def test_a_closed_writer_refuses_records_and_closes_twice(tmp_path):
    writer = NumericsWriter(tmp_path)
    writer.close()
    writer.close()
    writer.flush()
    with pytest.raises(ValueError, match="closed"):
        writer.add_record("x", record_of(np.ones(2, np.float32)), 0)


# --------------------------------------------------------------- what is written


@pytest.mark.parametrize(
    "tensor",
    [
        np.float32(3.0) * np.ones((), np.float32),
        np.zeros((0, 4), np.float32),
        np.array([np.nan, np.inf, -np.inf, 0.0, 1.0], np.float32),
        crafted("float16"),
        crafted("bfloat16"),
        crafted("float64"),
        random_binades("float32", 3000),
    ],
    ids=["0-d", "empty", "specials", "f16", "bf16", "f64", "random"],
)
def test_add_numerics_records_what_the_reference_computes(tmp_path, tensor):
    formats = ("float8_e4m3fn", "float16")
    with NumericsWriter(tmp_path, formats=formats) as writer:
        writer.add_numerics("layers.0", tensor, 7, tensor_type="Weight")
    ((run, info, step, record),) = _records(tmp_path)
    assert (run, info.name, info.tensor_type, info.formats, step) == (
        ".",
        "layers.0",
        "Weight",
        formats,
        7,
    )
    expected = stored(record_of(tensor, formats))
    assert record.dtype == expected.dtype
    assert (record.numel, record.zero_count, record.nan_count) == (
        expected.numel,
        expected.zero_count,
        expected.nan_count,
    )
    assert record.bins_lo == expected.bins_lo
    np.testing.assert_array_equal(record.counts, expected.counts)
    assert (record.underflow, record.overflow) == (expected.underflow, expected.overflow)
    for name, value in expected.statistics.items():
        assert record.statistics[name] == pytest.approx(value, rel=1e-6, nan_ok=True), name


def test_accepts_torch_and_jax_tensors(tmp_path):
    values = random_binades("float32", 500)
    with NumericsWriter(tmp_path) as writer:
        writer.add_numerics("t", torch.from_numpy(values), 0)
        writer.add_numerics("j", jnp.asarray(values), 0)
        writer.add_numerics("b", torch.from_numpy(values).to(torch.bfloat16), 0)
    records = {info.name: record for _, info, _, record in _records(tmp_path)}
    np.testing.assert_array_equal(records["t"].counts, records["j"].counts)
    assert records["b"].dtype == "bfloat16"


def test_metadata_is_sent_on_each_tags_first_event_only(tmp_path):
    record = record_of(random_binades("float32", 100))
    with NumericsWriter(tmp_path) as writer:
        for step in range(3):
            writer.add_record("a", record, step)
            writer.add_record("b", record, step, tensor_type="Gradient", module_type="Linear")
    (path,) = event_files(tmp_path)
    with_metadata = [
        value.tag
        for event in EventFileLoader(str(path)).Load()
        for value in event.summary.value
        if value.metadata.plugin_data.plugin_name == PLUGIN_NAME
    ]
    assert with_metadata == ["tandv/Activation/a", "tandv/Gradient/b"]
    infos = {(info.name, step): info for _, info, step, _ in _records(tmp_path)}
    assert infos[("b", 2)].module_type == "Linear"
    assert [infos[(n, 0)].order for n in "ab"] == [0, 1]


def test_order_and_module_type_are_fixed_by_the_first_record(tmp_path):
    record = record_of(np.ones(4, np.float32))
    with NumericsWriter(tmp_path) as writer:
        writer.add_record("late", record, 0, order=9, module_type="Conv2d")
        writer.add_record("late", record, 1, order=2, module_type="Other")
        writer.add_record("next", record, 0)
    orders = {(info.name, info.order, info.module_type) for _, info, _, _ in _records(tmp_path)}
    assert orders == {("late", 9, "Conv2d"), ("next", 1, "")}


def test_tensorboard_reads_the_tags(tmp_path):
    record = record_of(random_binades("float32", 200), ("float8_e5m2",))
    with NumericsWriter(tmp_path / "run") as writer:
        for step in range(150):
            writer.add_record("layers.0.attn.wq", record, step)
            writer.add_record("layers.0.attn.wq", record, step, tensor_type="Gradient")
    provider = _provider(tmp_path)
    listed = provider.list_tensors(RequestContext(), experiment_id="", plugin_name="tandv")
    assert set(listed["run"]) == {
        "tandv/Activation/layers.0.attn.wq",
        "tandv/Gradient/layers.0.attn.wq",
    }
    series = listed["run"]["tandv/Gradient/layers.0.attn.wq"]
    assert series.max_step == 149
    data = provider.read_tensors(
        RequestContext(), experiment_id="", plugin_name="tandv", downsample=1000
    )
    datum = data["run"]["tandv/Gradient/layers.0.attn.wq"]
    assert [d.step for d in datum] == list(range(150))
    info = next(i for _, i, _, _ in _records(tmp_path) if i.tensor_type == "Gradient")
    assert decode_tensor(datum[-1].numpy, info) == stored(record)


def test_tensorboards_rust_data_server_reads_the_tags(tmp_path):
    """The --load_fast=true loader (TensorBoard's Rust data server) reads the same data."""
    record = record_of(random_binades("float32", 200), ("float8_e4m3fn",))
    with NumericsWriter(tmp_path / "run") as writer:
        for step in range(300):
            writer.add_record("layers.0", record, step)
    ingester = server_ingester.SubprocessServerDataIngester(
        server_ingester.get_server_binary(),
        str(tmp_path),
        reload_interval=1,
        channel_creds_type=grpc_util.ChannelCredsType.LOCAL,
        samples_per_plugin={PLUGIN_NAME: 1000},
    )
    ingester.start()
    try:
        provider, listed = ingester.data_provider, {}
        deadline = time.time() + 60
        while not listed.get("run") and time.time() < deadline:
            time.sleep(0.1)
            listed = provider.list_tensors(RequestContext(), experiment_id="", plugin_name="tandv")
        series = listed["run"]["tandv/Activation/layers.0"]
        assert series.max_step == 299 and b'"formats":["float8_e4m3fn"]' in series.plugin_content
        data = provider.read_tensors(
            RequestContext(), experiment_id="", plugin_name="tandv", downsample=1000
        )
        datum = data["run"]["tandv/Activation/layers.0"]
        assert len(datum) == 300
        info = TagInfo("layers.0", "Activation", formats=("float8_e4m3fn",))
        assert decode_tensor(datum[-1].numpy, info) == stored(record)
    finally:
        ingester._stdin_handle.close()  # the server exits when its stdin closes


@pytest.mark.parametrize("kind", ["torch", "tensorboardX"])
def test_user_writer_gets_numerics_beside_its_scalars(tmp_path, kind):
    user = SummaryWriter(tmp_path) if kind == "torch" else tensorboardX.SummaryWriter(tmp_path)
    values = random_binades("float32", 300)
    with NumericsWriter(writer=user, formats=("float8_e4m3fn",)) as writer:
        assert writer.logdir == str(tmp_path)
        for step in range(3):
            user.add_scalar("loss", 1.0 / (step + 1), step)
            writer.add_numerics("layers.0", values, step, tensor_type="Activation")
    user.close()
    (path,) = event_files(tmp_path)  # one file holds both
    provider = _provider(tmp_path)
    tensors = provider.list_tensors(RequestContext(), experiment_id="", plugin_name="tandv")
    assert list(tensors["."]) == ["tandv/Activation/layers.0"]
    scalars = provider.read_scalars(
        RequestContext(), experiment_id="", plugin_name="scalars", downsample=100
    )
    assert [d.step for d in scalars["."]["loss"]] == [0, 1, 2]
    records = _records(tmp_path)
    assert [step for _, _, step, _ in records] == [0, 1, 2]
    assert records[0][3].underflow == stored(record_of(values, ("float8_e4m3fn",))).underflow


def test_threads_can_share_a_writer(tmp_path):
    record = record_of(random_binades("float32", 50))
    with NumericsWriter(tmp_path) as writer:

        def work(worker: int) -> None:
            for step in range(20):
                writer.add_record(f"layer.{worker}", record, step)

        threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    records = _records(tmp_path)
    assert len(records) == 80
    orders = {info.name: info.order for _, info, _, _ in records}
    assert sorted(orders.values()) == [0, 1, 2, 3]


# ---------------------------------------------------------- flushing and crashes


def test_flush_puts_data_on_disk_before_close(tmp_path):
    writer = NumericsWriter(tmp_path)
    writer.add_record("x", record_of(np.ones(3, np.float32)), 0)
    writer.flush()
    assert len(_records(tmp_path)) == 1
    writer.close()


def test_atexit_hook_is_unregistered_on_close(tmp_path):
    """The exit hook holds the writer alive until close, and lets it go then."""
    writer = NumericsWriter(tmp_path)
    alive = weakref.ref(writer)
    del writer
    gc.collect()
    assert alive() is not None
    alive().close()
    gc.collect()
    assert alive() is None


def _child(tmp_path: Path, body: str, **kwargs) -> subprocess.Popen:
    script = "import numpy as np, time\nimport tandv_tb.writer as w\n" + _RECORD
    script += textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path, env=env, **kwargs)


def test_interpreter_exit_flushes_without_close(tmp_path):
    child = _child(
        tmp_path,
        """
        writer = w.NumericsWriter("logs")
        for step in range(2000):  # none may be left behind at exit
            writer.add_record("x", record, step)
    """,
    )
    assert child.wait(timeout=60) == 0
    assert len(_records(tmp_path / "logs")) == 2000


@pytest.mark.parametrize("own", [True, False], ids=["own-writer", "torch-writer"])
def test_killed_process_leaves_valid_files_with_its_records(tmp_path, own):
    """Killed (SIGKILL) while writing: every record before the kill is readable; at most a
    half-written last record is lost (and reported)."""
    make = (
        'w.NumericsWriter("logs")'
        if own
        else 'w.NumericsWriter(writer=__import__("torch.utils.tensorboard").utils.tensorboard'
        '.SummaryWriter("logs"))'
    )
    child = _child(
        tmp_path,
        f"""
        writer = {make}
        for step in range(100_000):
            writer.add_record("x", record, step)
            if step == 200:
                print("200", flush=True)
            time.sleep(0.0005)
        """,
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout.readline().strip() == b"200"
        time.sleep(0.3)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)  # a half-written last record
        steps = [step for _, _, step, _ in read_records(tmp_path / "logs")]
    assert len(steps) >= 200 and steps == list(range(len(steps)))


def test_user_writers_are_flushed_periodically_until_close(tmp_path, monkeypatch):
    class CountingWriter(SummaryWriter):
        flushes = 0

        def flush(self) -> None:
            CountingWriter.flushes += 1
            super().flush()

    monkeypatch.setattr(writer_module, "FLUSH_SECS", 0.05)
    user = CountingWriter(tmp_path, flush_secs=600)
    writer = NumericsWriter(writer=user)
    time.sleep(0.6)
    assert CountingWriter.flushes >= 5
    writer.close()
    after_close = CountingWriter.flushes
    time.sleep(0.3)
    assert CountingWriter.flushes == after_close
    user.close()
