"""The compiled record walk (``disk.fast_framing``) against ``framing``: the same checksum
as ``google_crc32c`` on random bytes, the same records up to the first damage, and small
events (one per tensor) read as fast as the trackers' one event per step give the same
rows."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tandv_tb.event_files import framing
from tandv_tb.event_files.fast_framing import masked_crc32c, whole_records
from tandv_tb.frame.reading import read_frame
from tandv_tb.writer import NumericsWriter, RecordItem
from tests.helpers.event_io import event_files
from tests.helpers.plugin import make_record


@pytest.mark.parametrize("size", [0, 1, 7, 8, 9, 100, 4099])
def test_the_checksum_is_google_crc32c_masked(size):
    data = os.urandom(size)
    assert masked_crc32c(np.frombuffer(data, np.uint8)) == framing.masked_crc32c(data)


def _framed(count: int) -> bytes:
    rng = np.random.default_rng(count)
    return b"".join(framing.frame(rng.bytes(int(rng.integers(0, 300)))) for _ in range(count))


@pytest.mark.parametrize("damage", ["none", "header", "data", "cut"])
def test_the_walk_stops_at_the_first_record_framing_would_not_take(damage):
    data = bytearray(_framed(50))
    spans = [s for s in framing.frames(bytes(data), True) if isinstance(s, tuple)]
    tenth = spans[10][0] - framing.HEADER_BYTES  # where the 11th record starts
    if damage == "header":
        data[tenth + 9] ^= 1
    elif damage == "data":
        data[spans[10][1]] ^= 1  # its data checksum
    elif damage == "cut":
        data = data[: tenth + 5]
    starts, ends, stop = whole_records(np.frombuffer(bytes(data), np.uint8))
    expected = spans if damage == "none" else spans[:10]
    assert list(zip(starts.tolist(), ends.tolist())) == expected
    assert stop == (len(data) if damage == "none" else tenth)


def test_one_event_per_tensor_reads_as_one_event_per_step(tmp_path):
    rng = np.random.default_rng(0)
    records = [
        [make_record(rng, "bfloat16", ("float8_e4m3fn",)) for _ in range(5)] for _ in range(30)
    ]
    for layout in ("per_tensor", "per_step"):
        with NumericsWriter(tmp_path / layout) as writer:
            for step, step_records in enumerate(records):
                items = [RecordItem(f"l{i}", r) for i, r in enumerate(step_records)]
                if layout == "per_step":
                    writer.add_records(step, items)
                else:
                    for item in items:
                        writer.add_records(step, [item])
    sizes = {layout: len(event_files(tmp_path / layout)) for layout in ("per_tensor", "per_step")}
    assert sizes == {"per_tensor": 1, "per_step": 1}
    per_tensor, per_step = read_frame(tmp_path / "per_tensor"), read_frame(tmp_path / "per_step")
    assert per_tensor.drop(columns=[("metadata", "run")]).equals(
        per_step.drop(columns=[("metadata", "run")])
    )
    assert len(per_tensor) == 150
