"""The per-tag metadata and the per-step encoding (tandv_tb.event_files: metadata, summary)."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from tensorboard.compat.proto import summary_pb2, tensor_pb2, types_pb2
from tensorboard.util import tensor_util

from tandv_tb.event_files import metadata, record_columns, summary
from tandv_tb.event_files.metadata import TagInfo, UnsupportedVersion
from tandv_tb.event_files.record import STATISTICS, NumericsRecord
from tandv_tb.writer import NumericsWriter
from tests.helpers.event_io import event_files, record_of, stored
from tests.helpers.reference import crafted, random_binades

INFO = TagInfo("layers.0.attn.wq", "Activation", "Linear", 3, ("float8_e4m3fn", "float16"))


def test_metadata_round_trip_and_shape():
    meta = INFO.to_metadata()
    assert meta.plugin_data.plugin_name == metadata.PLUGIN_NAME == "tandv"
    assert meta.data_class == summary_pb2.DATA_CLASS_TENSOR
    content = meta.plugin_data.content
    assert b" " not in content  # compact JSON
    assert json.loads(content) == {
        "version": metadata.PLAIN_VERSION,
        "name": "layers.0.attn.wq",
        "tensor_type": "Activation",
        "module_type": "Linear",
        "order": 3,
        "formats": ["float8_e4m3fn", "float16"],
    }
    assert metadata.parse_plugin_metadata(content) == INFO
    assert INFO.tag == "tandv/Activation/layers.0.attn.wq"


def test_newer_version_is_refused_clearly():
    newer = metadata.PLUGIN_DATA_VERSION + 1
    content = json.dumps({**json.loads(INFO.to_metadata().plugin_data.content), "version": newer})
    with pytest.raises(UnsupportedVersion, match=f"version {newer}.*upgrade tandv_tb"):
        metadata.parse_plugin_metadata(content.encode())


def test_version_1_metadata_is_still_read():
    content = json.loads(INFO.to_metadata().plugin_data.content)
    old = metadata.parse_plugin_metadata(json.dumps({**content, "version": 1}).encode())
    assert old == dataclasses.replace(INFO, version=1)


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"\xff\xfe",
        b"[1, 2]",
        b'{"version": 1}',
        b'{"version": "1", "name": "a", "tensor_type": "Weight", "module_type": "", "order": 0}',
        b'{"version": 1, "name": "a", "tensor_type": "Weight", "module_type": "", "order": 0,'
        b' "formats": [3]}',
    ],
)
def test_malformed_metadata_is_a_value_error(content):
    with pytest.raises(ValueError, match="malformed tandv plugin metadata"):
        metadata.parse_plugin_metadata(content)


def test_tensor_types():
    for good in ("Activation", "Gradient", "Weight", "Weight_Gradient", "Optimiser_State.exp_avg"):
        assert metadata.check_tensor_type(good) == good
    for bad in ("Weights", "activation", "Optimiser_State.", "Optimiser_State.a/b", None, 3):
        with pytest.raises(ValueError, match="unknown tensor_type"):
            metadata.check_tensor_type(bad)


def test_dtype_codes_cover_the_contract_dtypes_and_are_unique():
    assert len(set(metadata.DTYPE_CODES)) == len(metadata.DTYPE_CODES)
    assert metadata.DTYPE_CODES[:4] == ("float64", "float32", "float16", "bfloat16")
    assert "float4_e2m1fn" in metadata.DTYPE_CODES


@pytest.mark.parametrize(
    "values",
    [
        random_binades("float32", 5000),
        crafted("float32"),
        crafted("bfloat16"),
        crafted("float16"),
        crafted("float8_e4m3fn"),
        crafted("float64"),
        np.zeros(0, dtype=np.float32),
        np.array(np.nan, dtype=np.float32),
        np.array([0.0, -0.0, np.inf], dtype=np.float64),
    ],
    ids=["random", "f32", "bf16", "f16", "e4m3fn", "f64", "empty", "nan", "f64-no-bins"],
)
def test_encode_decode_round_trip(values):
    info = TagInfo("x", "Gradient", formats=INFO.formats)
    record = record_of(values, INFO.formats)
    encoded = summary.encode_record(record, info.formats)
    assert encoded.dtype == np.int64 and encoded.ndim == 1
    assert record_columns.decode_tensor(encoded, info) == stored(record)


def test_float64_statistics_are_exact_and_float32_ones_rounded():
    values = np.array([0.1, 0.2, 0.7], dtype=np.float64)
    record = record_of(values)
    decoded = record_columns.decode_tensor(
        summary.encode_record(record, ()), TagInfo("x", "Weight")
    )
    assert decoded.statistics == record.statistics
    as32 = record_of(values.astype(np.float32))
    decoded = record_columns.decode_tensor(summary.encode_record(as32, ()), TagInfo("x", "Weight"))
    assert decoded.statistics["mean"] == float(np.float32(as32.statistics["mean"]))
    assert decoded.statistics["mean"] != as32.statistics["mean"]  # it was rounded


def test_float32_statistics_round_as_numpy_casts_them_up_to_inf():
    """Statistics of a float32 record given from outside (a DataFrame) may exceed float32:
    they round as numpy's cast does, to Inf from float32's max plus half an ulp on."""
    big = float(np.finfo(np.float32).max)
    half_ulp = 2.0**103
    edges = [big + half_ulp / 2, big + half_ulp, -1e300, 1e-50, -0.0, math.nan, math.inf]
    record = record_of(np.ones(3, np.float32))
    record.statistics = dict(zip(STATISTICS, edges + [1.0] * (len(STATISTICS) - len(edges))))
    decoded = record_columns.decode_tensor(
        summary.encode_record(record, ()), TagInfo("x", "Weight")
    )
    with np.errstate(over="ignore"):
        want = np.array(list(record.statistics.values())).astype(np.float32).astype(np.float64)
    got = np.array(list(decoded.statistics.values()))
    assert np.array_equal(got, want, equal_nan=True)
    assert np.signbit(got[4]) and np.isinf(got[1]) and got[0] == big


def test_layout_is_as_documented():
    record = NumericsRecord(
        "bfloat16",
        20,
        2,
        1,
        1,
        1,
        -3,
        np.array([4, 0, 11]),
        dict.fromkeys(STATISTICS, 1.0),
        {"float8_e4m3fn": 5},
        {"float8_e4m3fn": 6},
    )
    encoded = summary.encode_record(record, ("float8_e4m3fn",))
    one = int(np.array(1.0, np.float32).view(np.uint32))
    assert encoded.tolist() == [3, 20, 2, 1, 1, 1, 1097, 3, 4, 0, 11, 5, 6] + [one] * 9


def test_numerics_value_holds_metadata_and_1d_varint_bytes():
    record = record_of(random_binades("float32", 100), INFO.formats)
    value = summary.numerics_value(INFO, record)
    assert value.tag == "tandv/Activation/layers.0.attn.wq"
    assert value.metadata.plugin_data.plugin_name == "tandv"
    assert value.tensor.dtype == types_pb2.DT_UINT8 and not value.tensor.int64_val
    array = tensor_util.make_ndarray(value.tensor)
    assert array.dtype == np.uint8 and array.ndim == 1
    assert record_columns.decode_tensor(array, INFO) == stored(record)
    vector = summary.encode_record(record, INFO.formats)
    assert np.array_equal(summary.decode_varints(array), vector)


def test_version_1_tensors_are_still_read():
    record = record_of(random_binades("bfloat16", 100), INFO.formats)
    vector = summary.encode_record(record, INFO.formats)
    old = tensor_pb2.TensorProto(dtype=types_pb2.DT_INT64, int64_val=vector.tolist())
    old.tensor_shape.dim.add(size=len(vector))
    info = dataclasses.replace(INFO, version=1)
    assert record_columns.decode_tensor(tensor_util.make_ndarray(old), info) == stored(record)


@pytest.mark.parametrize(
    "values",
    [[], [0], [127, 128, 16383, 16384], [-1, -(2**63), 2**63 - 1, 1, -2]],
    ids=["empty", "zero", "byte-edges", "extremes"],
)
def test_varints_round_trip(values):
    vector = np.array(values, dtype=np.int64)
    data = summary.encode_varints(vector)
    assert len(data) >= len(values)
    decoded = summary.decode_varints(np.frombuffer(data, np.uint8))
    assert decoded.dtype == np.int64 and decoded.tolist() == values


def test_varints_match_protobuf_and_random_values_round_trip():
    rng = np.random.default_rng(3)
    vector = rng.integers(-(2**63), 2**63 - 1, 500, dtype=np.int64) >> rng.integers(0, 63, 500)
    data = summary.encode_varints(vector)
    packed = tensor_pb2.TensorProto(uint64_val=vector.view(np.uint64).tolist())
    assert packed.SerializeToString().endswith(data)
    assert np.array_equal(summary.decode_varints(np.frombuffer(data, np.uint8)), vector)


@pytest.mark.parametrize(
    ("data", "message"),
    [(b"\x05\x80", "cut off"), (b"\x80" * 10 + b"\x01", "longer than 10 bytes")],
)
def test_damaged_varints_are_a_value_error(data, message):
    with pytest.raises(ValueError, match=message):
        summary.decode_varints(np.frombuffer(data, np.uint8))
    record = np.frombuffer(summary.encode_varints(np.arange(30)) + data, np.uint8)
    with pytest.raises(ValueError, match=message):
        record_columns.decode_tensor(record, TagInfo("x", "Weight"))


def test_encode_refuses_mismatched_formats_and_unknown_dtypes():
    record = record_of(np.ones(3, np.float32), ("float16",))
    with pytest.raises(ValueError, match="formats"):
        summary.encode_record(record, ("float8_e5m2",))
    with pytest.raises(ValueError, match="no code"):
        summary.dtype_code("int8")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda a: a.reshape(1, -1), "1-D integer vector"),
        (lambda a: a.astype(np.float64), "1-D integer vector"),
        (lambda a: a[:5], "at least"),
        (lambda a: a[:-1], "values, got"),
        (lambda a: np.concatenate([a, [0]]), "block formats section"),
        (lambda a: np.concatenate([[99], a[1:]]), "unknown dtype code 99"),
        (lambda a: np.concatenate([a[:1], [a[1] + 1], a[2:]]), "add up to"),
        (lambda a: np.concatenate([a[:6], [1100 + 500], a[7:]]), "outside"),
        (lambda a: np.concatenate([a[:8], [-1], a[9:]]), "negative"),
    ],
)
def test_decode_rejects_malformed_tensors(mutate, message):
    info = TagInfo("x", "Activation")
    encoded = summary.encode_record(record_of(random_binades("float32", 50)), ())
    with pytest.raises(ValueError, match=message):
        record_columns.decode_tensor(mutate(encoded), info)


def test_statistics_nan_survives():
    record = record_of(np.array([np.nan, np.inf], np.float32))
    decoded = record_columns.decode_tensor(
        summary.encode_record(record, ()), TagInfo("x", "Gradient")
    )
    assert all(math.isnan(decoded.statistics[k]) for k in STATISTICS)


def _typical_record(rng: np.random.Generator) -> NumericsRecord:
    """A float32 tensor of 1M values over ~40 non-empty bins, as a training step gives."""
    size = 1 << 20
    magnitudes = rng.uniform(1, 2, size) * np.exp2(rng.integers(-20, 20, size))
    values = magnitudes * rng.choice([-1.0, 1.0], size)
    return record_of(values.astype(np.float32))


def test_size_per_tracked_tensor_per_step(tmp_path):
    """At most 300 bytes per tensor per step: the growth of the event file per step."""
    record = _typical_record(np.random.default_rng(0))
    assert 36 <= len(record.counts) <= 44 and record.counts.max() > 10_000
    steps = 200
    with NumericsWriter(tmp_path) as writer:
        writer.add_record("layers.0.attn.wq", record, 0)
        writer.flush()
        (path,) = event_files(tmp_path)
        start = path.stat().st_size
        for step in range(1, steps + 1):
            writer.add_record("layers.0.attn.wq", record, step)
        writer.flush()
        per_step = (path.stat().st_size - start) / steps
    print(f"bytes per tracked tensor per step: {per_step:.1f}")
    assert per_step <= 300
