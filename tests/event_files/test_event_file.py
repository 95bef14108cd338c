"""The own event file: TensorFlow's framing and checksums (checked against TensorBoard's
own pure-Python CRC), TensorBoard's file names, one event per ``add_records`` call, and no
litter when the disk is full."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as tb_crc
from torch import nn
from torch.utils.tensorboard import SummaryWriter

from tandv_tb import NumericsWriter
from tandv_tb.event_files.event_file import EventFile
from tandv_tb.event_files.framing import masked_crc32c
from tandv_tb.event_files.graph_record import GRAPH_TAG
from tandv_tb.torch import track
from tandv_tb.writer import RecordItem
from tests.helpers.event_checks import check_event_file
from tests.helpers.event_io import event_files, record_of


@pytest.mark.parametrize("size", [0, 1, 7, 8, 9, 63, 64, 1000, 100_000])
def test_masked_crc32c_is_tensorflows(size):
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    assert masked_crc32c(data) == tb_crc(data)


def test_a_new_file_is_named_as_tensorboard_names_its_own_and_starts_with_the_version(tmp_path):
    events = EventFile(str(tmp_path / "new" / "run"))
    name = Path(events.path).name
    assert name.startswith("events.out.tfevents.") and f".{os.getpid()}." in name
    assert not check_event_file(Path(events.path))  # whole, version event first
    assert EventFile(str(tmp_path / "new" / "run")).path != events.path


def test_a_summary_writer_and_a_tracker_on_one_logdir_keep_their_own_files(tmp_path):
    """Made in the same second by the same process, TensorBoard's file and ours would have
    the same name but for tandv_tb's suffix; neither may overwrite the other."""
    user = SummaryWriter(tmp_path)
    numerics = NumericsWriter(tmp_path)
    numerics.add_numerics("x", np.ones(4, np.float32), 0)
    user.add_scalar("loss", 1.5, 0)
    user.close()
    numerics.close()
    files = event_files(tmp_path)
    assert len(files) == 2
    tags = {v.tag for f in files for e in EventFileLoader(str(f)).Load() for v in e.summary.value}
    assert tags == {"loss", "tandv/Activation/x"}


def test_each_add_records_call_is_one_event_holding_every_tag(tmp_path):
    record = record_of(np.linspace(-2, 3, 50, dtype=np.float32))
    with NumericsWriter(tmp_path) as writer:
        for step in range(3):
            items = [RecordItem(f"layers.{i}", record, "Gradient", "Linear", i) for i in range(5)]
            writer.add_records(step, items)
    (path,) = event_files(tmp_path)
    events = list(EventFileLoader(str(path)).Load())[1:]
    assert [e.step for e in events] == [0, 1, 2]
    assert all(len(e.summary.value) == 5 for e in events)
    described = [sum(v.HasField("metadata") for v in e.summary.value) for e in events]
    assert described == [5, 0, 0]  # a tag's metadata is written with its first record


def test_a_bad_item_stops_the_whole_call_before_anything_is_written(tmp_path):
    record = record_of(np.ones(4, np.float32))
    with NumericsWriter(tmp_path) as writer, pytest.raises(ValueError, match="tensor_type"):
        writer.add_records(0, [RecordItem("a", record), RecordItem("b", record, "Bogus")])
    (path,) = event_files(tmp_path)
    assert len(list(EventFileLoader(str(path)).Load())) == 1  # the version event alone


def test_a_tracked_step_is_one_event(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with track(model, logdir=tmp_path, optimizer=optimizer) as tracker:
        for _ in range(4):
            model(torch.randn(3, 4)).square().mean().backward()
            optimizer.step()
            optimizer.zero_grad()
            tracker.step()
    (path,) = event_files(tmp_path)
    events = list(EventFileLoader(str(path)).Load())[1:]
    graph = [[v.tag for v in e.summary.value] == [GRAPH_TAG] for e in events]
    assert [e.step for e, g in zip(events, graph) if g] == [0]  # an event of its own, once
    events = [e for e, g in zip(events, graph) if not g]
    assert [e.step for e in events] == [0, 1, 2, 3]
    tags = [sorted(v.tag for v in e.summary.value) for e in events]
    assert all(t == tags[0] for t in tags) and len(tags[0]) == len(set(tags[0]))
    assert any("/Optimiser_State.momentum_buffer/" in t for t in tags[0])


def test_a_file_that_cannot_be_started_on_a_full_disk_is_removed(tmp_path, monkeypatch):
    """The file is created, its first event fails with the disk's error: nothing is left."""

    def full(self, event) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(EventFile, "write", full)
    with pytest.raises(OSError, match="No space"):
        EventFile(str(tmp_path))
    assert event_files(tmp_path) == []
