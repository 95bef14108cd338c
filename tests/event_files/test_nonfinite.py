"""The non-finite watch's on-disk record: encoded, written, read back, refused when bad."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2

import tandv_tb
from tandv_tb.event_files import metadata
from tandv_tb.event_files.event_file import EventFile
from tandv_tb.event_files.nonfinite import read_nonfinite
from tandv_tb.event_files.nonfinite_record import (
    NONFINITE_TAG,
    NonfiniteEntry,
    NonfiniteStep,
    decode_nonfinite,
    encode_nonfinite,
    merge,
)
from tandv_tb.frame import DataWarning

HOSTILE = [
    NonfiniteEntry("Activation", "<img src=x onerror=alert(1)>", 3, 0, 0),
    NonfiniteEntry("Gradient", "quote \" and \\ backslash '", 0, 2, 1),
    NonfiniteEntry("Weight", "名前.ünïcödé.🙂", 0, 0, 5),
    NonfiniteEntry("Optimiser_State.exp_avg", "a\nnew line\u2028", 2**40, 1, 0),
]


def _string_tensor(payload: bytes, dims=()) -> tensor_pb2.TensorProto:
    shape = tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in dims]
    )
    return tensor_pb2.TensorProto(
        dtype=types_pb2.DT_STRING, tensor_shape=shape, string_val=[payload] * max(1, *dims, 1)
    )


def test_encode_then_decode_gives_the_entries_back_hostile_names_included():
    value = encode_nonfinite(HOSTILE)
    assert value.tag == NONFINITE_TAG
    assert value.metadata.plugin_data.plugin_name == "tandv"
    assert value.metadata.data_class == summary_pb2.DATA_CLASS_TENSOR
    content = json.loads(value.metadata.plugin_data.content)
    assert content == {"version": 2, "kind": "nonfinite"}
    assert value.tensor.dtype == types_pb2.DT_STRING
    assert not value.tensor.tensor_shape.dim
    stored = json.loads(value.tensor.string_val[0].decode("utf-8"))
    assert stored[0] == {
        "tensor_type": "Activation",
        "name": "<img src=x onerror=alert(1)>",
        "nan": 3,
        "posinf": 0,
        "neginf": 0,
    }
    assert decode_nonfinite(value.tensor) == HOSTILE


@pytest.mark.parametrize(
    "payload, message",
    [
        (b"\xff\xfe", "not UTF-8 JSON"),
        (b"{not json", "not UTF-8 JSON"),
        (b'{"name": "x"}', "expected a JSON list"),
        (b"[1]", "expected an object"),
        (b'[{"tensor_type": "Activation", "nan": 1, "posinf": 0, "neginf": 0}]', "'name'"),
        (b'[{"tensor_type": 3, "name": "x", "nan": 1, "posinf": 0, "neginf": 0}]', "tensor_type"),
        (b'[{"tensor_type": "A", "name": "x", "nan": -1, "posinf": 0, "neginf": 0}]', "'nan'"),
        (b'[{"tensor_type": "A", "name": "x", "nan": 1.5, "posinf": 0, "neginf": 0}]', "'nan'"),
        (b'[{"tensor_type": "A", "name": "x", "nan": true, "posinf": 0, "neginf": 0}]', "'nan'"),
        (b'[{"tensor_type": "A", "name": "x", "nan": 1, "posinf": 0}]', "'neginf'"),
    ],
)
def test_malformed_payloads_raise_a_clear_value_error(payload, message):
    with pytest.raises(ValueError, match=message):
        decode_nonfinite(_string_tensor(payload))


def test_a_tensor_that_is_not_one_string_is_refused():
    with pytest.raises(ValueError, match="DT_STRING"):
        decode_nonfinite(tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[1.0]))
    with pytest.raises(ValueError, match="0-d"):
        decode_nonfinite(_string_tensor(b"[]", dims=(2,)))


def test_encoding_refuses_bad_entries():
    with pytest.raises(ValueError, match="'posinf'"):
        encode_nonfinite([NonfiniteEntry("Activation", "x", 1, -2, 0)])
    with pytest.raises(ValueError, match="'name'"):
        encode_nonfinite([NonfiniteEntry("Activation", None, 1, 0, 0)])


def test_merge_orders_by_execution_and_adds_repeated_calls():
    observed = [
        ("opt", "Optimiser_State.exp_avg", (1, 0, 0)),
        ("w", "Weight", (0, 1, 0)),
        ("b", "Activation", (0, 0, 0)),  # clean: left out
        ("a", "Activation", (1, 0, 0)),
        ("g", "Weight_Gradient", (2, 0, 0)),
        ("a", "Gradient", (0, 0, 3)),
        ("a", "Activation", (1, 1, 0)),  # a second call of module a
    ]
    assert merge(observed) == [
        NonfiniteEntry("Activation", "a", 2, 1, 0),
        NonfiniteEntry("Gradient", "a", 0, 0, 3),
        NonfiniteEntry("Weight_Gradient", "g", 2, 0, 0),
        NonfiniteEntry("Weight", "w", 0, 1, 0),
        NonfiniteEntry("Optimiser_State.exp_avg", "opt", 1, 0, 0),
    ]


def test_the_record_is_not_a_numerics_tag():
    content = encode_nonfinite(HOSTILE).metadata.plugin_data.content
    assert metadata.plugin_kind(content) == metadata.NONFINITE_KIND
    with pytest.raises(metadata.NotNumerics):
        metadata.parse_plugin_metadata(content)
    numerics = metadata.create_summary_metadata("x", "Activation").plugin_data.content
    assert metadata.plugin_kind(numerics) == metadata.NUMERICS_KIND
    assert metadata.plugin_kind(b"\xff") is None


def _write_run(logdir):
    with tandv_tb.NumericsWriter(str(logdir)) as writer:
        writer.add_numerics("layer", np.array([1.0, np.nan], np.float32), 3)
        writer.add_nonfinite(5, HOSTILE[:2])
        writer.add_nonfinite(6, [])  # nothing to write
        writer.add_records(
            7,
            [tandv_tb.writer.RecordItem("layer", _record([np.inf]))],
            nonfinite=HOSTILE[2:],
        )


def _record(values):
    from tandv_tb import stats

    return stats.tensor_stats(np.array(values, np.float32)).to_record()


def test_written_records_read_back_and_leave_read_frame_silent(tmp_path):
    _write_run(tmp_path / "a")
    _write_run(tmp_path / "b")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no DataWarning for the watch's tag
        frame = tandv_tb.read_frame(tmp_path)
        found = read_nonfinite(tmp_path)
    assert sorted(set(frame[("metadata", "step")])) == [3, 7]
    assert found == [
        NonfiniteStep("a", 5, tuple(HOSTILE[:2])),
        NonfiniteStep("a", 7, tuple(HOSTILE[2:])),
        NonfiniteStep("b", 5, tuple(HOSTILE[:2])),
        NonfiniteStep("b", 7, tuple(HOSTILE[2:])),
    ]
    assert read_nonfinite(tmp_path, run="b") == found[2:]
    # step 7's numerics and non-finite entries are one event, read by TensorBoard's loader
    events = list(EventFileLoader(str(next((tmp_path / "a").glob("*tfevents*")))).Load())
    step7 = [e for e in events if e.step == 7]
    assert len(step7) == 1
    assert {v.tag for v in step7[0].summary.value} == {"tandv/Activation/layer", NONFINITE_TAG}


def test_read_nonfinite_errors_and_malformed_records(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_nonfinite(tmp_path / "missing")
    _write_run(tmp_path / "a")
    with pytest.raises(ValueError, match="no run 'c'"):
        read_nonfinite(tmp_path, run="c")
    assert read_nonfinite(tmp_path / "a")[0].run == "."
    # a malformed payload in a later file of the run: skipped with a DataWarning
    value = encode_nonfinite(HOSTILE[:1])
    value.tensor.string_val[0] = b"[{]"
    EventFile(str(tmp_path / "a")).write(
        event_pb2.Event(step=9, summary=summary_pb2.Summary(value=[value]))
    )
    with pytest.warns(DataWarning, match="malformed record of 'tandv/_nonfinite' at step 9"):
        found = read_nonfinite(tmp_path)
    assert [s.step for s in found] == [5, 7]
