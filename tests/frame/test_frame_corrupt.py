"""read_frame on damaged event files: real files from NumericsWriter, then damaged.

Whatever the damage, read_frame serves every record whose bytes are intact and warns
(``DataWarning``) naming the file, the reason and, where known, the tag and step.
"""

from __future__ import annotations

import os
import struct
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

from tandv_tb.event_files.metadata import TagInfo
from tandv_tb.event_files.summary import encode_record
from tandv_tb.frame import DataWarning, read_frame
from tandv_tb.writer import NumericsWriter
from tests.helpers.event_io import event_files, record_of, tensor_proto, write_raw_events
from tests.helpers.reference import crafted

STEPS = 10


def _write(logdir: Path, names=("l",)) -> Path:
    with NumericsWriter(logdir, formats=("float8_e4m3fn",)) as writer:
        for step in range(STEPS):
            for name in names:
                writer.add_numerics(name, crafted("float32") / (step + 1), step)
                writer.flush()  # one event per record (a step's records are one otherwise)
    (path,) = event_files(logdir)
    return path


def _offsets(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of each record, read from the lengths alone (the file is intact)."""
    spans, offset = [], 0
    while offset < len(data):
        end = offset + 16 + struct.unpack_from("<Q", data, offset)[0]
        spans.append((offset, end))
        offset = end
    return spans


def _read(logdir: Path) -> tuple[pd.DataFrame, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = read_frame(logdir)
    assert all(issubclass(w.category, DataWarning) for w in caught), caught
    return df, [str(w.message) for w in caught]


def _rows(df: pd.DataFrame) -> list[tuple[str, int]]:
    return list(zip(df[("metadata", "name")], df[("metadata", "step")]))


def _damage(path: Path, edit) -> None:
    data = bytearray(path.read_bytes())
    edit(data)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("keep", [1, 6, 12, 13, 40, -4, -1], ids=lambda k: f"keep{k}")
def test_truncated_last_record_is_skipped_with_a_warning(tmp_path, keep):
    path = _write(tmp_path)
    data = path.read_bytes()
    start, end = _offsets(data)[-1]
    path.write_bytes(data[: (start + keep) if keep > 0 else (end + keep)])
    df, messages = _read(tmp_path)
    assert _rows(df) == [("l", s) for s in range(STEPS - 1)]
    (message,) = messages
    assert path.name in message and "truncated" in message and f"after step {STEPS - 2}" in message


@pytest.mark.parametrize("where", ["length", "header crc", "data", "data crc"])
def test_a_damaged_middle_record_costs_only_that_record(tmp_path, where):
    path = _write(tmp_path)
    start, end = _offsets(path.read_bytes())[5]  # record 0 is the file version: step 4
    at = {"length": start + 1, "header crc": start + 9, "data": start + 30, "data crc": end - 2}

    def flip(data):
        data[at[where]] ^= 0x5A

    _damage(path, flip)
    df, messages = _read(tmp_path)
    assert _rows(df) == [("l", s) for s in range(STEPS) if s != 4]
    (message,) = messages
    assert path.name in message and "damaged" in message
    assert "after step 3" in message and "before step 5" in message


def test_zero_filled_tail_and_inserted_garbage_are_skipped(tmp_path):
    path = _write(tmp_path)
    spans = _offsets(path.read_bytes())

    def garble(data):
        data[spans[3][0] : spans[3][0]] = os.urandom(100) + bytes(50)  # between two records
        data.extend(bytes(4096))  # a crash on a filesystem that extends before it writes

    _damage(path, garble)
    df, messages = _read(tmp_path)
    assert _rows(df) == [("l", s) for s in range(STEPS)]
    assert len(messages) == 2 and all(path.name in m and "damaged" in m for m in messages)


def test_a_lost_first_record_of_a_tag_is_reported(tmp_path):
    path = _write(tmp_path, names=("a", "b"))
    spans = _offsets(path.read_bytes())

    def flip(data):
        data[spans[2][0] + 30] ^= 1  # b's first record: it carries b's metadata

    _damage(path, flip)
    df, messages = _read(tmp_path)
    assert _rows(df) == [("a", s) for s in range(STEPS)]
    assert any("'tandv/Activation/b'" in m and "metadata" in m for m in messages)


def _raw_record(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    crc = struct.pack("<I", masked_crc32c(length))
    return length + crc + data + struct.pack("<I", masked_crc32c(data))


def test_a_record_that_is_no_event_is_skipped(tmp_path):
    path = _write(tmp_path)
    spans = _offsets(path.read_bytes())

    def insert(data):
        data[spans[3][0] : spans[3][0]] = _raw_record(b"\xff\xff\xff not a proto")

    _damage(path, insert)
    df, messages = _read(tmp_path)
    assert _rows(df) == [("l", s) for s in range(STEPS)]
    (message,) = messages
    assert "not a valid Event proto" in message and "after step 1" in message


def _tensor(dtype=types_pb2.DT_UINT8, dims=(3,), **fields) -> tensor_pb2.TensorProto:
    shape = tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in dims]
    )
    return tensor_pb2.TensorProto(dtype=dtype, tensor_shape=shape, **fields)


WRONG_TENSORS = {
    "2-D": _tensor(dims=(2, 2), tensor_content=b"\x01\x02\x03\x04"),
    "float": _tensor(types_pb2.DT_FLOAT, (2,), float_val=[1.0, 2.0]),
    "string": _tensor(types_pb2.DT_STRING, (1,), string_val=[b"x"]),
    "unknown dtype": _tensor(999, (1,), tensor_content=b"\x01"),
    "huge shape": _tensor(types_pb2.DT_INT64, (10**12,), int64_val=[1]),
    "ragged bytes": _tensor(types_pb2.DT_INT32, (2,), tensor_content=b"\x01\x02\x03"),
    "too short": _tensor(tensor_content=b"\x01\x02\x03"),
}


@pytest.mark.parametrize("kind", WRONG_TENSORS)
def test_a_numerics_tag_with_a_wrong_tensor_is_skipped_at_that_step(tmp_path, kind):
    info = TagInfo("l", "Activation")
    good = tensor_proto(encode_record(record_of(crafted("float32")), ()))
    write_raw_events(
        tmp_path,
        [
            (0, summary_pb2.Summary.Value(tag=info.tag, metadata=info.to_metadata(), tensor=good)),
            (1, summary_pb2.Summary.Value(tag=info.tag, tensor=WRONG_TENSORS[kind])),
            (2, summary_pb2.Summary.Value(tag=info.tag, tensor=good)),
        ],
    )
    df, messages = _read(tmp_path)
    assert _rows(df) == [("l", 0), ("l", 2)]
    (message,) = messages
    assert "'tandv/Activation/l'" in message and "step 1" in message and "malformed" in message


def test_unreadable_file_is_skipped_and_the_others_read(tmp_path):
    _write(tmp_path / "good")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "events.out.tfevents.1.host").symlink_to(tmp_path / "missing")
    df, messages = _read(tmp_path)
    assert len(df) == STEPS and set(df[("metadata", "run")]) == {"good"}
    (message,) = messages
    assert "events.out.tfevents.1.host" in message and "cannot be read" in message


@st.composite
def _edits(draw):
    """Up to 3 edits (flip a byte, insert bytes, cut the file), by relative position."""
    kinds = st.sampled_from(["flip", "insert", "cut"])
    where = st.floats(0, 1, exclude_max=True)
    return draw(st.lists(st.tuples(kinds, where, st.binary(min_size=1, max_size=30)), max_size=3))


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(edits=_edits())
def test_any_damage_serves_every_intact_record(tmp_path_factory, edits):
    logdir = tmp_path_factory.mktemp("damaged")
    path = _write(logdir, names=("a", "b"))
    data = bytearray(path.read_bytes())
    spans = _offsets(bytes(data))
    damaged, removed = set(), set()
    placed = {int(where * len(data)): (kind, payload) for kind, where, payload in edits}
    for at, (kind, payload) in sorted(placed.items(), reverse=True):  # back to front
        if kind == "flip":
            data[at] ^= payload[0] or 1
        elif kind == "insert":
            data[at:at] = payload
        else:
            del data[at:]
            removed |= {i for i, (start, _) in enumerate(spans) if start >= at}
        inside = at + (kind == "flip")  # bytes inserted at a record's start leave it intact
        damaged |= {i for i, (start, end) in enumerate(spans) if start < inside and at < end}
    touched = damaged | removed
    path.write_bytes(bytes(data))
    df, messages = _read(logdir)
    # record 1 + 2 * step + k holds tag k's step (record 0: file version; first: metadata)
    intact = {1: "a", 2: "b"}
    expected = sorted(
        (name, (i - k) // 2)
        for i in range(1, len(spans))
        for k, name in intact.items()
        if (i - k) % 2 == 0 and i not in touched and k not in touched
    )
    assert sorted(_rows(df)) == expected
    assert bool(messages) >= bool(damaged - removed) and bool(messages) <= bool(edits)


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    content=st.binary(max_size=40),
    dtype=st.integers(0, 30),
    dims=st.lists(st.integers(0, 2**40), max_size=3),
    payload=st.binary(max_size=40),
)
def test_any_metadata_or_tensor_gives_rows_or_a_warning(tmp_path, content, dtype, dims, payload):
    logdir = tmp_path / str(abs(hash((content, dtype, tuple(dims), payload))))
    meta = TagInfo("x", "Gradient").to_metadata()
    meta.plugin_data.content = content
    tensor = _tensor(dtype, dims, tensor_content=payload)
    good = TagInfo("l", "Activation")
    encoded = tensor_proto(encode_record(record_of(np.ones(3, np.float32)), ()))
    write_raw_events(
        logdir,
        [
            (0, summary_pb2.Summary.Value(tag="tandv/Gradient/x", metadata=meta, tensor=tensor)),
            (
                0,
                summary_pb2.Summary.Value(
                    tag=good.tag, metadata=good.to_metadata(), tensor=encoded
                ),
            ),
        ],
    )
    df, messages = _read(logdir)
    assert ("l", 0) in _rows(df)
    assert len(df) == 2 or messages
