"""scan_events against protobuf's own parse: real event files and hand-built events with
every field (fuzzed bytes: ``test_event_scan_fuzz``)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2
from torch.utils.tensorboard import SummaryWriter

from tandv_tb.event_files import event_scan, event_wire
from tandv_tb.event_files.event_scan import scan_events
from tandv_tb.event_files.tag_intern import intern_tags
from tandv_tb.writer import NumericsWriter, RecordItem
from tests.helpers.event_io import event_files, record_of

# ------------------------------------------------------------------ helpers


def _frames(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An event file's bytes and the byte ranges of its records' events."""
    raw = path.read_bytes()
    starts, ends, pos = [], [], 0
    while pos < len(raw):
        (length,) = struct.unpack_from("<Q", raw, pos)
        starts.append(pos + 12)
        ends.append(pos + 12 + length)
        pos += 12 + length + 4
    return np.frombuffer(raw, np.uint8), np.array(starts), np.array(ends)


def _joined(events: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The events one after the other in one buffer, and their byte ranges."""
    ends = np.cumsum([len(e) for e in events], dtype=np.int64)
    return np.frombuffer(b"".join(events), np.uint8), ends - [len(e) for e in events], ends


def _varints(raw: bytes) -> list[int]:
    """Packed int64 varints, decoded independently of the scanner."""
    out, value, shift = [], 0, 0
    for byte in raw:
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            out.append(value - (1 << 64) if value >= 1 << 63 else value)
            value, shift = 0, 0
    assert shift == 0
    return out


def _expected(event: event_pb2.Event) -> tuple:
    """What the scan must give for an event protobuf parsed: step, wall_time bits, values."""
    values = []
    if event.WhichOneof("what") == "summary":
        for v in event.summary.value:
            dims = v.tensor.tensor_shape.dim
            values.append(
                (
                    v.tag,
                    v.metadata if v.HasField("metadata") else None,
                    v.HasField("tensor"),
                    v.tensor.dtype,
                    len(dims),
                    dims[0].size if dims else -1,
                    v.tensor.tensor_content,
                    list(v.tensor.int64_val),
                )
            )
    return event.step, struct.pack("<d", event.wall_time), values


def _scanned(data: np.ndarray, s: event_scan.ScannedValues, names: list[str], tag_index, e: int):
    """The same tuple, from the scan."""
    raw = data.tobytes()
    values = []
    for i in np.flatnonzero(s.event == e):
        meta = None
        if s.meta_start[i] >= 0:
            meta_bytes = raw[s.meta_start[i] : s.meta_start[i] + s.meta_len[i]]
            meta = summary_pb2.SummaryMetadata.FromString(meta_bytes)
        assert (s.int64_start[i] >= 0) or s.int64_len[i] == 0
        assert (s.content_start[i] >= 0) or s.content_len[i] == 0
        int64 = raw[s.int64_start[i] : s.int64_start[i] + s.int64_len[i]]
        assert names[tag_index[i]] == raw[s.tag_start[i] : s.tag_start[i] + s.tag_len[i]].decode()
        values.append(
            (
                names[tag_index[i]],
                meta,
                bool(s.has_tensor[i]),
                s.dtype[i],
                s.n_dims[i],
                s.dim0[i],
                raw[s.content_start[i] : s.content_start[i] + s.content_len[i]],
                _varints(int64) if s.int64_start[i] >= 0 else [],
            )
        )
    return s.step[e], struct.pack("<d", s.wall_time[e]), values


def _check(data: np.ndarray, starts, ends) -> event_scan.ScannedValues:
    """Scan, and check every event against protobuf: ok events give exactly its parse, events
    protobuf refuses are not ok, and not-ok events give no values."""
    s = scan_events(data, np.asarray(starts), np.asarray(ends))
    names, tag_index = intern_tags(data, s)
    assert len(set(names)) == len(names)
    assert np.all(np.diff(s.event) >= 0)
    raw = data.tobytes()
    for e, (start, end) in enumerate(zip(starts, ends)):
        if not 0 <= start <= end <= len(raw):
            assert not s.ok[e]
            continue
        try:
            event = event_pb2.Event.FromString(raw[start:end])
        except Exception:  # protobuf's DecodeError (upb) or others
            assert not s.ok[e], f"event {e}: protobuf refuses it, the scan accepted it"
            continue
        if s.ok[e]:
            assert _scanned(data, s, names, tag_index, e) == _expected(event), f"event {e}"
        else:
            assert not np.any(s.event == e)
            assert s.step[e] == 0 and s.wall_time[e] == 0
    return s


def _value(tag: str = "t", **tensor) -> summary_pb2.Summary.Value:
    return summary_pb2.Summary.Value(tag=tag, tensor=tensor_pb2.TensorProto(**tensor))


def _event(*values: summary_pb2.Summary.Value, step: int = 3, wall_time: float = 1.25) -> bytes:
    event = event_pb2.Event(step=step, wall_time=wall_time)
    event.summary.value.extend(values)
    return event.SerializeToString()


def _key(field: int, wire: int) -> bytes:
    return _leb128(field << 3 | wire)


def _leb128(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out) + bytes([value])


def _len(field: int, body: bytes) -> bytes:
    return _key(field, 2) + _leb128(len(body)) + body


def _summary_event(*raw_values: bytes, rest: bytes = b"") -> bytes:
    """An Event whose summary holds the given raw Value bodies."""
    return _key(2, 0) + _leb128(7) + _len(5, b"".join(_len(1, v) for v in raw_values)) + rest


# ------------------------------------------------------------------ schema


def test_field_numbers_match_the_descriptors():
    value, tensor, shape = summary_pb2.Summary.Value, tensor_pb2.TensorProto, tensor_shape_pb2
    read = [
        (event_pb2.Event, "wall_time", event_wire.F_EVENT_WALL_TIME),
        (event_pb2.Event, "step", event_wire.F_EVENT_STEP),
        (event_pb2.Event, "summary", event_wire.F_EVENT_SUMMARY),
        (summary_pb2.Summary, "value", event_wire.F_SUMMARY_VALUE),
        (value, "tag", event_wire.F_VALUE_TAG),
        (value, "tensor", event_wire.F_VALUE_TENSOR),
        (value, "metadata", event_wire.F_VALUE_METADATA),
        (tensor, "dtype", event_wire.F_TENSOR_DTYPE),
        (tensor, "tensor_shape", event_wire.F_TENSOR_SHAPE),
        (tensor, "tensor_content", event_wire.F_TENSOR_CONTENT),
        (tensor, "int64_val", event_wire.F_TENSOR_INT64_VAL),
        (shape.TensorShapeProto, "dim", event_wire.F_SHAPE_DIM),
        (shape.TensorShapeProto.Dim, "size", event_wire.F_DIM_SIZE),
    ]
    for message, name, number in read:
        assert message.DESCRIPTOR.fields_by_name[name].number == number, name


# ------------------------------------------------------------------ real files


def test_numerics_writer_file(tmp_path):
    rng = np.random.default_rng(0)
    with NumericsWriter(str(tmp_path), formats=("float8_e4m3fn",)) as writer:
        for step in range(5):
            items = [
                RecordItem(f"layer{k}/<b>w</b>", record_of(rng.normal(size=50) * 2.0**k), "Weight")
                for k in range(4)
            ]
            writer.add_records(step, items)
            writer.add_numerics("solo", np.full(3, np.nan, np.float32), step, "Gradient")
    [path] = event_files(tmp_path)
    s = _check(*_frames(path))
    assert s.ok.all()
    assert len(s.event) == 25
    assert s.has_tensor.all() and (s.content_len > 0).all()
    assert (s.meta_start >= 0).sum() == 5  # metadata on each tag's first record only
    names, tag_index = intern_tags(_frames(path)[0], s)
    assert len(names) == 5 and all(n.endswith(("/solo", "/<b>w</b>")) for n in names)
    assert np.bincount(tag_index).tolist() == [5] * 5


def test_torch_summary_writer_file(tmp_path):
    writer = SummaryWriter(str(tmp_path))
    for step in range(3):
        writer.add_scalar("loss", 1.0 / (step + 1), step)
        writer.add_scalars("pair", {"a": step, "b": -step}, step)
        writer.add_histogram("hist", torch.arange(10.0) * step, step)
        writer.add_text("note", f"<i>step</i> {step} ✓", step)
        writer.add_image("img", torch.zeros(3, 4, 4), step)
    writer.close()
    has_tensor = []
    for path in event_files(tmp_path):  # add_scalars writes a run per scalar
        s = _check(*_frames(path))
        assert s.ok.all()
        has_tensor.extend(s.has_tensor)
    assert not all(has_tensor) and any(has_tensor)  # scalars, histograms, images and text


# ------------------------------------------------------------------ hand-built events


def test_every_field():
    shape = tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=s, name="d") for s in (3, -1, 2**40)]
    )
    full = _value(
        "≤ <script>alert(1)</script> 🙂",
        dtype=9,
        tensor_shape=shape,
        tensor_content=b"\x00\xff" * 10,
        int64_val=[0, -1, 2**63 - 1, -(2**63), 300],
        float_val=[1.5],
        string_val=[b"\xff"],
    )
    full.metadata.plugin_data.plugin_name = "tandv"
    full.metadata.plugin_data.content = b"\x01\x02"
    full.metadata.display_name = "é"
    full.node_name = "node"
    events = [
        _event(full, _value("", dtype=1), step=-(2**63), wall_time=float("nan")),
        _event(
            _value("empty", tensor_content=b"", tensor_shape=tensor_shape_pb2.TensorShapeProto())
        ),
        _event(summary_pb2.Summary.Value(tag="scalar", simple_value=0.5)),
        _event(summary_pb2.Summary.Value(tag="no value")),
        _event(step=2**63 - 1, wall_time=-0.0),
        event_pb2.Event(file_version="brain.Event:2", wall_time=5.0).SerializeToString(),
        b"",
    ]
    s = _check(*_joined(events))
    assert s.ok.all()
    assert s.step.tolist() == [-(2**63), 3, 3, 3, 2**63 - 1, 0, 0]
    assert s.n_dims.tolist()[:2] == [3, 0] and s.dim0.tolist()[:2] == [3, -1]


@pytest.mark.parametrize(
    ("name", "event", "ok"),
    [
        # singular fields: the last occurrence wins, even a zero
        ("tag twice", _summary_event(_len(1, b"a") + _len(1, b"bc")), True),
        (
            "dtype twice",
            _summary_event(_len(8, _key(1, 0) + b"\x05" + _key(1, 0) + b"\x00")),
            True,
        ),
        ("negative dtype", _summary_event(_len(8, _key(1, 0) + _leb128(-3))), True),
        ("huge dtype", _summary_event(_len(8, _key(1, 0) + _leb128(2**40 + 2**31 + 5))), True),
        ("content twice", _summary_event(_len(8, _len(4, b"xy") + _len(4, b"z"))), True),
        ("step twice", _key(2, 0) + b"\x05" + _key(2, 0) + b"\x06", True),
        # repeated fields: occurrences add up
        ("summary twice", _summary_event(_len(1, b"a")) + _len(5, _len(1, _len(1, b"b"))), True),
        (
            "shape twice",
            _summary_event(
                _len(8, _len(2, _len(2, _key(1, 0) + b"\x04")) + _len(2, _len(2, b"") * 2))
            ),
            True,
        ),
        (
            "dim size twice",
            _summary_event(_len(8, _len(2, _len(2, _key(1, 0) + b"\x04" + _key(1, 0) + b"\x09")))),
            True,
        ),
        ("first dim without size", _summary_event(_len(8, _len(2, _len(2, b"")))), True),
        ("empty packed int64", _summary_event(_len(8, _len(10, b""))), True),
        # unknown fields of every wire type are skipped
        (
            "unknown fields",
            _summary_event(
                _len(8, _key(99, 0) + b"\x80\x01" + _key(98, 1) + bytes(8) + _key(97, 5) + bytes(4))
                + _len(100, b"\xff\xff")
            )
            + _key(50, 2)
            + b"\x00",
            True,
        ),
        ("unpacked float_val", _summary_event(_len(8, _key(5, 5) + bytes(4))), True),
        ("unknown field 2**28 in event", _key(2**28, 0) + b"\x01", True),
        ("unknown field 2**29 - 1 in value", _summary_event(_len(2**29 - 1, b"")), True),
        ("tag of 6 bytes", _summary_event() + b"\x90\x80\x80\x80\x80\x00\x01", False),
        # what the ranges cannot describe: the caller falls back to protobuf
        ("unpacked int64_val", _summary_event(_len(8, _key(10, 0) + b"\x07")), False),
        ("int64_val twice", _summary_event(_len(8, _len(10, b"\x01") + _len(10, b"\x02"))), False),
        ("tensor twice", _summary_event(_len(8, b"") + _len(8, b"")), False),
        ("metadata twice", _summary_event(_len(9, b"") + _len(9, b"")), False),
        ("tensor then simple_value", _summary_event(_len(8, b"") + _key(2, 5) + bytes(4)), False),
        ("simple_value then tensor", _summary_event(_key(2, 5) + bytes(4) + _len(8, b"")), False),
        ("summary then file_version", _summary_event(rest=_len(3, b"v")), False),
        ("file_version then summary", _len(3, b"v") + _summary_event(), False),
        # malformed
        ("truncated varint", _key(2, 0) + b"\x80", False),
        ("11-byte varint", _key(2, 0) + b"\x80" * 10 + b"\x00", False),
        ("varint past 64 bits", _key(2, 0) + b"\xff" * 9 + b"\x02", False),
        ("field number 0", _key(0, 0) + b"\x00", False),
        ("group wire type", _key(60, 3) + _key(60, 4), False),
        ("wire type 6", _key(60, 6), False),
        ("wrong wire type for step", _key(2, 5) + bytes(4), False),
        ("wrong wire type for tag", _summary_event(_key(1, 0) + b"\x01"), False),
        ("length 2**63", _key(5, 2) + _leb128(2**63), False),
        ("length 2**64 - 1", _key(5, 2) + _leb128(2**64 - 1), False),
        ("length 2**31", _key(5, 2) + _leb128(2**31), False),
        ("length past the end", _key(5, 2) + b"\x05\x00", False),
        ("child past its parent", _len(5, _key(1, 2) + b"\x05") + bytes(5), False),
        ("invalid UTF-8 tag", _summary_event(_len(1, b"\xc3\x28")), False),
        ("surrogate in tag", _summary_event(_len(1, b"\xed\xa0\x80")), False),
        ("invalid UTF-8 plugin name", _summary_event(_len(9, _len(1, _len(1, b"\xff")))), False),
        ("packed varints truncated", _summary_event(_len(8, _len(10, b"\x80"))), False),
        ("packed floats of 3 bytes", _summary_event(_len(8, _len(5, b"abc"))), False),
        ("fixed64 truncated", _key(1, 1) + bytes(7), False),
        ("deep nesting", _len(5, _len(1, _len(8, _len(15, _len(4, b""))))), True),
    ],
)
def test_edge_cases(name, event, ok):
    s = _check(*_joined([event]))
    assert s.ok[0] == ok, name


def test_nesting_deeper_than_the_limit_is_not_ok():
    body = b""
    for _ in range(40):  # VariantTensorDataProto.tensors -> TensorProto.variant_val -> ...
        body = _len(15, _len(3, body))
    s = _check(*_joined([_summary_event(_len(8, body))]))
    assert not s.ok[0]


def test_byte_ranges_outside_the_data_are_not_ok():
    event = _event(_value("a", tensor_content=b"x"))
    data = np.frombuffer(event, np.uint8)
    n = len(event)
    starts = [0, -1, 0, 5, 0, 2**62, -(2**63)]
    ends = [n, n, n + 1, 4, 2**63 - 1, 2**62 + 1, n]
    s = _check(data, starts, ends)
    assert s.ok.tolist() == [True] + [False] * 6


def test_bad_arguments():
    with pytest.raises(ValueError, match="uint8"):
        scan_events(np.zeros(3, np.int32), np.zeros(1), np.zeros(1))
    with pytest.raises(ValueError, match="shapes"):
        scan_events(np.zeros(3, np.uint8), np.zeros(2), np.zeros(1))


def test_no_events_and_many_values():
    s = scan_events(np.zeros(0, np.uint8), np.zeros(0), np.zeros(0))
    assert len(s.ok) == 0 and len(s.event) == 0
    assert intern_tags(np.zeros(0, np.uint8), s)[0] == []
    # past the first table sizes (values and distinct tags)
    values = [_value(f"tag{k % 3000}", int64_val=[k]) for k in range(5000)]
    s = _check(*_joined([_event(*values[:2500]), _event(*values[2500:])]))
    assert s.ok.all() and len(s.event) == 5000


def test_a_value_table_too_small_grows():
    """The table is sized by counting the values first; started too small, it grows (and
    the event that filled it is scanned again) with the same result."""
    events = [_event(*(_value(f"t{k}", int64_val=[k]) for k in range(j, 40))) for j in range(9)]
    events.insert(3, _summary_event(_len(1, b"x"), _len(1, b"\xff")))  # fails after a value
    data, starts, ends = _joined(events)
    assert event_scan._count_values(data, starts, ends) == sum(range(32, 41)) + 2
    whole = scan_events(data, starts, ends)
    assert whole.ok.tolist() == [True] * 3 + [False] + [True] * 6
    grown = event_scan._scan(data, starts, ends, 1, *event_wire.schema())
    assert grown[4] == len(whole.event)
    assert np.array_equal(grown[3][:, : grown[4]][event_scan._TAG_START], whole.tag_start)
    assert np.array_equal(grown[3][:, : grown[4]][event_scan._INT64_START], whole.int64_start)
    assert np.array_equal(grown[2], whole.ok)
