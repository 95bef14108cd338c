"""The plugin's own store (``tandv_tb.store``): every recorded step through a real
``tensorboard``, incremental reading, reuse after a restart, and each fault it must survive
(damaged files, deleted runs, an unwritable or damaged cache, a cache of another version,
two servers on one logdir)."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import duckdb
import numpy as np
import pytest

from tandv_tb.store import NumericsStore
from tandv_tb.store.database import database_path
from tandv_tb.writer import NumericsWriter, RecordItem
from tests.helpers.plugin import TensorBoardProcess, heatmap_values, make_record
from tests.helpers.store_runs import ROUTES, stored_steps, write_run


def _event_file(run_dir: Path) -> Path:
    (path,) = run_dir.glob("*tfevents*")
    return path


def test_a_real_tensorboard_serves_every_step_and_the_nan_column(tmp_path):
    steps, nan_at = 3200, 1717
    write_run(tmp_path / "logs" / "long", range(steps), nan_at=nan_at)
    server = TensorBoardProcess(tmp_path / "logs", "true", f"--tandv_cache_dir={tmp_path / 'c'}")
    try:
        server.wait(lambda: server.json(ROUTES + "runs")["runs"], "the run to be listed")
        body = server.json(
            ROUTES + "series?run=long&tensor_type=Activation&layer=layers.1&metric=mean"
        )
        assert body["series"][0]["steps"] == list(range(steps))  # TensorBoard holds 1 step
        heat = server.json(
            ROUTES + "heatmap?run=long&tensor_type=Activation&metric=nonfinite_count&columns=100"
        )
        values = heatmap_values(heat)
        hit = [c for c in heat["columns"] if c["first_step"] <= nan_at <= c["last_step"]]
        (column,) = hit
        index = heat["columns"].index(column)
        assert values[1][index] > 0 and values[0][index] == 0
        assert [i for i, v in enumerate(values[1]) if v] == [index]
        assert heat["total_steps"] == steps
    finally:
        server.close()


def test_a_growing_run_is_read_as_it_grows(tmp_path):
    run = tmp_path / "logs" / "live"
    server = TensorBoardProcess(tmp_path / "logs", "true", f"--tandv_cache_dir={tmp_path / 'c'}")
    rng = np.random.default_rng(0)
    writer = NumericsWriter(str(run))
    try:

        def held() -> list[int]:
            layers = server.json(ROUTES + "layers?run=live&tensor_type=Activation")["layers"]
            return [layer["steps"] for layer in layers]

        for stop in (5, 12, 30):
            for step in range(stop - (5 if stop == 5 else 7 if stop == 12 else 18), stop):
                writer.add_record("x", make_record(rng, "float32"), step)
            server.wait(lambda stop=stop: held() == [stop], f"{stop} steps of a live run")
    finally:
        writer.close()
        server.close()


def test_a_record_still_being_written_is_read_once_whole(tmp_path, caplog):
    run = tmp_path / "logs" / "r"
    write_run(run, range(3))
    db = NumericsStore(str(tmp_path / "logs"), tmp_path / "c", refresh_secs=0)
    assert stored_steps(db, "r") == [0, 1, 2]
    write_run(tmp_path / "other", range(4))  # its last record: step 3, as a writer appends it
    other = _event_file(tmp_path / "other").read_bytes()
    record = other[_record_offsets(other)[-1] :]
    with caplog.at_level(logging.WARNING):
        with open(_event_file(run), "ab") as file:
            file.write(record[:-7])
        assert stored_steps(db, "r") == [0, 1, 2]  # the cut record waits, it is not damage
        with open(_event_file(run), "ab") as file:
            file.write(record[-7:])
        assert stored_steps(db, "r") == [0, 1, 2, 3]
    assert not [r for r in caplog.records if "damaged" in r.message or "truncated" in r.message]


def test_a_restart_reuses_the_store_and_a_replaced_file_is_read_again(tmp_path):
    run = tmp_path / "logs" / "r"
    write_run(run, range(50))
    db = NumericsStore(str(tmp_path / "logs"), tmp_path / "c", refresh_secs=0)
    assert stored_steps(db, "r") == list(range(50))
    db.close()
    path = _event_file(run)
    data = path.read_bytes()
    path.write_bytes(data[:64] + bytes(len(data) - 64))  # same size and head: not re-read
    db = NumericsStore(str(tmp_path / "logs"), tmp_path / "c", refresh_secs=0)
    assert stored_steps(db, "r") == list(range(50))
    path.unlink()
    write_run(run, range(100, 103))  # replaced: another file, other steps
    assert stored_steps(db, "r") == [100, 101, 102]
    newest = _event_file(run)
    newest.write_bytes(newest.read_bytes()[:100])  # shrank: read again from its start
    db.refresh("r")
    assert db.tags("r")["tandv/Activation/layers.0"]  # its metadata is still known
    assert db.rows("r", [0, 1], ()).steps.tolist() == []


def test_damaged_bytes_lose_only_their_records(tmp_path, caplog):
    run = tmp_path / "logs" / "r"
    write_run(run, range(10))
    path = _event_file(run)
    data = bytearray(path.read_bytes())
    offsets = _record_offsets(bytes(data))
    start = offsets[5] + 20  # inside the data of the event of step 4
    data[start : start + 4] = b"\xff\xff\xff\xff"
    path.write_bytes(bytes(data))
    db = NumericsStore(str(tmp_path / "logs"), tmp_path / "c", refresh_secs=0)
    with caplog.at_level(logging.WARNING):
        assert stored_steps(db, "r") == [0, 1, 2, 3, 5, 6, 7, 8, 9]
    assert any("damaged" in r.message and "after step 3" in r.message for r in caplog.records)


def _record_offsets(data: bytes) -> list[int]:
    offsets, offset = [], 0
    while offset < len(data):
        offsets.append(offset)
        offset += 16 + int.from_bytes(data[offset : offset + 8], "little")
    return offsets


def test_a_deleted_run_is_forgotten_without_errors(tmp_path):
    write_run(tmp_path / "logs" / "a", range(5))
    write_run(tmp_path / "logs" / "b", range(5))
    server = TensorBoardProcess(tmp_path / "logs", "true", f"--tandv_cache_dir={tmp_path / 'c'}")
    try:
        server.wait(lambda: len(server.json(ROUTES + "runs")["runs"]) == 2, "two runs")
        assert (
            server.json(ROUTES + "layers?run=a&tensor_type=Activation")["layers"][0]["steps"] == 5
        )
        shutil.rmtree(tmp_path / "logs" / "a")

        def gone() -> bool:
            status, body, _ = server.get(ROUTES + "layers?run=a&tensor_type=Activation")
            if status == 404:
                return True
            assert status == 200, body
            return [layer["steps"] for layer in json.loads(body)["layers"]] == [0, 0]

        server.wait(gone, "the deleted run's data to be gone")
        status, _, _ = server.get(ROUTES + "histogram?run=a&tensor_type=Activation&layer=layers.0")
        assert status == 404
        assert (
            server.json(ROUTES + "layers?run=b&tensor_type=Activation")["layers"][0]["steps"] == 5
        )
    finally:
        server.close()


def test_an_unwritable_cache_folder_gives_way_to_a_temporary_one(tmp_path, caplog):
    write_run(tmp_path / "logs" / "r", range(4))
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the cache folder should be")
    with caplog.at_level(logging.WARNING):
        db = NumericsStore(str(tmp_path / "logs"), blocker, refresh_secs=0)
    assert any("temporary" in r.message for r in caplog.records)
    assert not db.path.is_relative_to(blocker)
    assert stored_steps(db, "r") == [0, 1, 2, 3]


@pytest.mark.parametrize("damage", ["garbage", "other_version"])
def test_a_damaged_or_foreign_store_is_rebuilt(tmp_path, caplog, damage):
    write_run(tmp_path / "logs" / "r", range(6))
    db = NumericsStore(str(tmp_path / "logs"), tmp_path / "c", refresh_secs=0)
    assert stored_steps(db, "r") == list(range(6))
    db.close()
    path = database_path(str(tmp_path / "logs"), tmp_path / "c")
    if damage == "garbage":
        data = bytearray(path.read_bytes())
        data[: 1 << 14] = os.urandom(1 << 14)  # as a killed process might leave it
        path.write_bytes(bytes(data))
    else:
        with duckdb.connect(str(path)) as connection:
            connection.execute("UPDATE meta SET value = '0' WHERE key = 'schema'")
            connection.execute("DELETE FROM records WHERE step > 2")  # what it would misread
    with caplog.at_level(logging.WARNING):
        db = NumericsStore(str(tmp_path / "logs"), tmp_path / "c", refresh_secs=0)
    assert any("rebuilt" in r.message for r in caplog.records)
    assert db.path == path and stored_steps(db, "r") == list(range(6))


def test_two_servers_on_one_logdir_and_one_cache(tmp_path):
    write_run(tmp_path / "logs" / "r", range(40))
    flags = ("true", f"--tandv_cache_dir={tmp_path / 'c'}")
    servers = [TensorBoardProcess(tmp_path / "logs", *flags) for _ in range(2)]
    try:
        for server in servers:
            series = server.wait(
                lambda s=server: s.json(
                    ROUTES + "series?run=r&tensor_type=Activation&layer=layers.0&metric=rm2"
                )["series"],
                "the series",
            )
            assert series[0]["steps"] == list(range(40))
    finally:
        for server in servers:
            server.close()
    logs = "".join(Path(s.log.name).read_text() for s in servers)
    assert "temporary" in logs  # the second one said it could not share the store


def test_two_logdirs_that_share_a_run_keep_their_own_stores(tmp_path):
    write_run(tmp_path / "outer" / "inner" / "r", range(7))
    outer = NumericsStore(str(tmp_path / "outer"), tmp_path / "c", refresh_secs=0)
    inner = NumericsStore(str(tmp_path / "outer" / "inner"), tmp_path / "c", refresh_secs=0)
    assert outer.path != inner.path
    assert stored_steps(outer, "inner/r") == stored_steps(inner, "r") == list(range(7))


def test_the_watch_records_and_scalars_are_stored(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    from tandv_tb.event_files.nonfinite import NonfiniteEntry

    run = tmp_path / "logs" / "r"
    summary = SummaryWriter(str(run))
    writer = NumericsWriter(writer=summary)
    rng = np.random.default_rng(0)
    entries = [
        NonfiniteEntry("Gradient", "<b>head</b>", 3, 1, 0),
        NonfiniteEntry("Weight", "w", 0, 0, 2),
    ]
    for step in range(6):
        writer.add_records(
            step,
            [RecordItem("x", make_record(rng, "float32"))],
            nonfinite=entries if step == 4 else (),
        )
        summary.add_scalar("loss", 1.0 / (step + 1), step)
    summary.add_scalar("loss", 7.0, 5)  # written twice: the later one stays
    writer.close()
    summary.close()
    db = NumericsStore(str(tmp_path / "logs"), tmp_path / "c", refresh_secs=0)
    assert db.runs() == ["r"]
    db.refresh("r")
    (found,) = db.nonfinite("r")
    assert found.step == 4 and list(found.entries) == entries
    steps, values = db.scalars("r")["loss"]
    assert steps.tolist() == list(range(6))
    assert values.tolist() == [np.float32(1.0 / (s + 1)) for s in range(5)] + [7.0]
    assert stored_steps(db, "r", "tandv/Activation/x") == list(range(6))


def test_steps_out_of_order_and_a_step_written_again_keep_the_later_record(tmp_path):
    run = tmp_path / "logs" / "r"
    rng = np.random.default_rng(3)
    written = {}
    with NumericsWriter(str(run)) as writer:
        for step in (5, 3, 4, 0, 3, 9, 4):  # out of order; 3 and 4 twice
            record = make_record(rng, "float32")
            writer.add_record("x", record, step)
            written[step] = record.statistics["max_abs"]
    db = NumericsStore(str(tmp_path / "logs"), tmp_path / "c", refresh_secs=0)
    db.refresh("r")
    tag_id = db.tags("r")["tandv/Activation/x"][0]
    rows = db.rows("r", [tag_id], ("max_abs",))
    assert rows.steps.tolist() == [0, 3, 4, 5, 9]
    expected = [np.float32(written[s]) for s in (0, 3, 4, 5, 9)]
    assert rows.columns["max_abs"].tolist() == expected


def test_the_watch_record_is_no_layer_and_no_skipped_tag(tmp_path):
    from tandv_tb.event_files.nonfinite import NonfiniteEntry
    from tests.helpers.plugin import TensorBoardApp

    rng = np.random.default_rng(1)
    with NumericsWriter(str(tmp_path / "r")) as writer:
        for step in range(3):
            entries = [NonfiniteEntry("Activation", "x", 1, 0, 0)] if step == 1 else ()
            writer.add_records(step, [RecordItem("x", make_record(rng, "float32"))], entries)
    app = TensorBoardApp(tmp_path, "python")
    try:
        body = app.json("runs")
        assert body["skipped"] == []
        assert body["runs"][0]["tensor_types"] == ["Activation"]
    finally:
        app.close()


def _tensor_scalar(step: int, value: float, with_metadata: bool):
    """An event of a tensor scalar as TensorFlow 2 writes one; its metadata (plugin
    ``scalars``) only in the tag's first event, as TensorFlow 1's writer strips it after."""
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2

    metadata = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
    )
    tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[value])
    summary = summary_pb2.Summary.Value(tag="loss", tensor=tensor)
    if with_metadata:
        summary.metadata.CopyFrom(metadata)
    return event_pb2.Event(step=step, wall_time=1e9 + step, summary={"value": [summary]})


def test_a_tensor_scalar_is_kept_across_a_restart(tmp_path):
    """The scalar tags seen are restored with the run's tags: the values after a restart,
    without metadata, are still the same tag's."""
    from tandv_tb.event_files.event_file import EventFile

    events = EventFile(str(tmp_path / "logs" / "r"))
    for step in range(4):
        events.write(_tensor_scalar(step, 0.5 * step, with_metadata=step == 0))
    db = NumericsStore(str(tmp_path / "logs"), tmp_path / "c", refresh_secs=0)
    db.refresh("r")
    assert db.scalars("r")["loss"][0].tolist() == [0, 1, 2, 3]
    db.close()
    for step in range(4, 7):
        events.write(_tensor_scalar(step, 0.5 * step, with_metadata=False))
    again = NumericsStore(str(tmp_path / "logs"), tmp_path / "c", refresh_secs=0)
    try:
        again.refresh("r")
        steps, values = again.scalars("r")["loss"]
        assert steps.tolist() == list(range(7))
        assert values.tolist() == [0.5 * step for step in range(7)]
        series = again.scalar_series("r", ["loss"])["loss"]
        assert series.wall_times.tolist() == [1e9 + step for step in range(7)]
    finally:
        again.close()
