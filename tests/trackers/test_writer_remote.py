"""``NumericsWriter`` on object storage (a local S3 server) and its write scheme: each flush
a new event-file object whose name sorts after the ones before; TensorBoard's two loaders
read every object of such a run; a killed process loses only what it had not flushed; and
hand-written records of one step are one event."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from tensorboard import context as tb_context
from tensorboard.compat.proto import event_pb2, summary_pb2

from tandv_tb.event_files.event_objects import EventObjects
from tandv_tb.frame.reading import read_frame
from tandv_tb.writer import NumericsWriter
from tests.helpers.event_checks import check_event_file
from tests.helpers.event_io import event_files
from tests.helpers.plugin import TensorBoardApp
from tests.helpers.s3_server import s3 as s3  # noqa: F401 (the fixture)


def _keys(s3, prefix: str) -> list[str]:
    listed = s3.client().list_objects_v2(Bucket="written", Prefix=prefix).get("Contents", [])
    return [entry["Key"] for entry in listed]


def test_each_flush_writes_a_new_object_named_in_write_order(s3, tmp_path):
    url = s3.bucket("written") + "/runs/a"
    rng = np.random.default_rng(0)
    with NumericsWriter(url, formats=("float8_e4m3fn",)) as writer:
        for step in range(9):
            for name in ("x", "y"):
                writer.add_numerics(name, rng.normal(size=32).astype(np.float32), step)
            if step % 3 == 2:
                writer.flush()
                assert len(_keys(s3, "runs/a/")) == step // 3 + 1
        writer.flush()  # nothing new: no empty object
    keys = _keys(s3, "runs/a/")
    assert len(keys) == 3 and keys == sorted(keys)
    assert [key.rsplit(".", 2)[1] for key in keys] == ["000000", "000001", "000002"]
    frame = read_frame("s3://written/runs")
    assert sorted(set(frame[("metadata", "step")])) == list(range(9)) and len(frame) == 18
    local = tmp_path / "copy"
    local.mkdir()
    for key in keys:
        s3.client().download_file("written", key, str(local / key.rsplit("/", 1)[1]))
    assert not any(check_event_file(path) for path in event_files(local))  # each whole


_KILLED = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    from tandv_tb.writer import NumericsWriter
    writer = NumericsWriter(sys.argv[1])
    for step in range(10):
        writer.add_numerics("x", np.ones(8, np.float32) * step, step)
        if step == 4:
            writer.flush()
    print("written", flush=True)
    time.sleep(600)
    """
)


def test_a_killed_process_loses_only_what_it_had_not_flushed(s3):
    url = s3.bucket("killed") + "/runs/a"
    process = subprocess.Popen(
        [sys.executable, "-c", _KILLED, url], stdout=subprocess.PIPE, text=True, env=os.environ
    )
    try:
        assert process.stdout.readline().strip() == "written"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    frame = read_frame("s3://killed/runs")
    assert sorted(frame[("metadata", "step")]) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("loader", ["python", "rust"])
def test_both_loaders_read_every_object_of_a_run(tmp_path, loader):
    """Objects written as by object storage (a local folder written through fsspec, whole
    files per flush), each holding numerics and a TensorBoard scalar per step."""
    run = tmp_path / "logs" / "r"
    run.mkdir(parents=True)
    objects = EventObjects(f"file://{run}")
    for step in range(12):
        loss = summary_pb2.Summary.Value(tag="loss", simple_value=float(step))
        objects.write(
            event_pb2.Event(
                wall_time=1.0 + step, step=step, summary=summary_pb2.Summary(value=[loss])
            )
        )
        if step % 2:
            objects.flush()
    assert len(event_files(run)) == 6
    with NumericsWriter(f"{tmp_path / 'logs' / 'r'}") as writer:  # and numerics beside them
        writer.add_numerics("x", np.ones(4, np.float32), 11)
    app = TensorBoardApp(tmp_path / "logs", loader)
    try:
        app.wait_for(tags=1, max_step=11)
        ctx = tb_context.RequestContext()
        scalars = app.provider.read_scalars(
            ctx, experiment_id="", plugin_name="scalars", downsample=1000
        )
        assert [point.step for point in scalars["r"]["loss"]] == list(range(12))
    finally:
        app.close()


def test_a_steps_hand_written_records_are_one_event(tmp_path):
    with NumericsWriter(tmp_path) as writer:
        for step in range(4):
            for name in ("a", "b", "c"):
                writer.add_numerics(name, np.full(8, step + 1, np.float32), step)
    (path,) = event_files(tmp_path)
    events = list(_events(path.read_bytes()))
    assert [len(e.summary.value) for e in events] == [0, 3, 3, 3, 3]  # the version, then steps
    assert [e.step for e in events[1:]] == [0, 1, 2, 3]


def _events(data: bytes):
    offset = 0
    while offset < len(data):
        length = int.from_bytes(data[offset : offset + 8], "little")
        yield event_pb2.Event.FromString(data[offset + 12 : offset + 12 + length])
        offset += 16 + length


def test_a_process_that_exits_without_closing_writes_its_last_object(s3):
    url = s3.bucket("exited") + "/runs/a"
    code = (
        "import sys, numpy as np\n"
        "from tandv_tb.writer import NumericsWriter\n"
        "writer = NumericsWriter(sys.argv[1])\n"
        "for step in range(3):\n"
        "    writer.add_numerics('x', np.ones(8, np.float32), step)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, url], capture_output=True, text=True, env=os.environ
    )
    assert done.returncode == 0 and "Warning" not in done.stderr, done.stderr
    frame = read_frame("s3://exited/runs")
    assert sorted(frame[("metadata", "step")]) == [0, 1, 2]
