"""read_frame and validate over real event files: runs, columns, records skipped, the schema."""

from __future__ import annotations

import time

import ml_dtypes
import numpy as np
import pandas as pd
import pytest
from tensorboard.compat.proto import summary_pb2
from torch.utils.tensorboard import SummaryWriter

from tandv_tb.event_files.metadata import PLAIN_VERSION, TagInfo, create_summary_metadata
from tandv_tb.event_files.record import COUNTS, STATISTICS
from tandv_tb.event_files.summary import encode_record
from tandv_tb.frame import DataWarning, SchemaError, read_frame, validate
from tests.helpers.event_io import record_of, tensor_proto, write_raw_events
from tests.helpers.frames import NEG, POS, row_counts, set_first, small_frame, write_records
from tests.helpers.frames import frame_warnings as frame_warnings  # noqa: F401 (autouse fixture)
from tests.helpers.reference import crafted, random_binades

# ---------------------------------------------------------------------- reading


def test_round_trip_runs_order_and_values(tmp_path):
    a = random_binades("float32", 2000, seed=1)
    b = crafted("float16")
    written = write_records(tmp_path, [("dec", "Activation", 1, a), ("enc", "Activation", 0, b)])
    # event files sort by the second they were opened in (then a per-process counter that
    # sorts as text): a new second makes the first writer's file sort first for certain
    time.sleep(1.1)
    written.update(
        write_records(tmp_path, [("enc", "Activation", 2, a), ("dec", "Activation", 0, b)])
    )
    written.update(write_records(tmp_path / "x" / "y", [("w", "Weight", 5, crafted("bfloat16"))]))
    df = validate(read_frame(tmp_path))
    meta = df["metadata"]
    # the first file fixes each tag's metadata for the run ("dec" 0, "enc" 1), as in
    # TensorBoard: the second writer's orders (the other way round) are ignored
    assert list(zip(meta["run"], meta["order"], meta["step"], meta["name"])) == [
        (".", 0, 0, "dec"),
        (".", 0, 1, "dec"),
        (".", 1, 0, "enc"),
        (".", 1, 2, "enc"),
        ("x/y", 0, 5, "w"),
    ]
    assert set(meta["type"]) == {"Linear"} and list(meta["tensor_type"])[-1] == "Weight"
    assert list(meta["dtype"]) == ["float16", "float32", "float16", "float32", "bfloat16"]
    labels = list(df["exponent_counts"].columns)
    assert labels == [NEG, *range(-149, 128), POS]  # the dtypes' whole range
    assert list(df["scalar_stats"].columns) == [*STATISTICS, *COUNTS]
    for _, row in df.iterrows():
        m = row["metadata"]
        record = written[(m["name"], m["tensor_type"], m["step"])]
        for name in STATISTICS:
            assert row[("scalar_stats", name)] == pytest.approx(
                record.statistics[name], nan_ok=True, rel=0, abs=0
            )
        for name in COUNTS:
            assert row[("scalar_stats", name)] == getattr(record, name)
        expected = {n: c for n, c in record.exponent_histogram().items()}
        if record.zero_count:
            expected[NEG] = record.zero_count
        if record.posinf_count + record.neginf_count:
            expected[POS] = record.posinf_count + record.neginf_count
        assert row_counts(row) == expected


def test_column_dtypes(tmp_path):
    write_records(tmp_path, [("a", "Gradient", 0, crafted("float32"))])
    df = read_frame(tmp_path)
    for column in ("name", "type", "tensor_type", "dtype", "run"):
        assert pd.api.types.is_string_dtype(df[("metadata", column)])
    for column in ("step", "order", *[("x", c) for c in ()]):
        assert df[("metadata", column)].dtype == np.int64
    assert all(df[("scalar_stats", c)].dtype == np.float64 for c in STATISTICS)
    assert all(df[("scalar_stats", c)].dtype == np.int64 for c in COUNTS)
    assert (df["exponent_counts"].dtypes == np.int64).all()


def test_run_filter(tmp_path):
    write_records(tmp_path / "a", [("l", "Activation", 0, crafted("float32"))])
    write_records(tmp_path / "b", [("l", "Activation", 0, crafted("float32"))])
    assert list(read_frame(tmp_path, run="b")[("metadata", "run")]) == ["b"]
    with pytest.raises(ValueError, match="no run 'c'.*'a', 'b'"):
        read_frame(tmp_path, run="c")


def test_missing_logdir_and_bad_format(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope"):
        read_frame(tmp_path / "nope")
    write_records(tmp_path, [("l", "Activation", 0, crafted("float32"))])
    with pytest.raises(ValueError, match="float9"):
        read_frame(tmp_path, format="float9")


def test_folders_without_numerics_give_an_empty_frame(tmp_path):
    empty = read_frame(tmp_path)
    with SummaryWriter(tmp_path / "scalars") as user:
        user.add_scalar("loss", 1.0, 0)
    only_scalars = read_frame(tmp_path)
    for df in (empty, only_scalars):
        assert len(df) == 0
        validate(df)
        assert list(df["metadata"].columns) == [
            "name",
            "type",
            "tensor_type",
            "step",
            "dtype",
            "run",
            "order",
        ]
        assert list(df["exponent_counts"].columns) == [NEG, POS]
    assert list(read_frame(tmp_path, format="float8_e4m3fn")["exponent_counts"].columns) == [
        NEG,
        *range(-9, 9),
        POS,
    ]


# ------------------------------------------------------------ damaged files


def _steps(df: pd.DataFrame) -> list[int]:
    return list(df[("metadata", "step")])


# truncated and damaged event files: tests/frame/test_frame_corrupt.py


def _value(info: TagInfo, array: np.ndarray, content: bytes | None = None):
    meta = info.to_metadata()
    if content is not None:
        meta.plugin_data.content = content
    return summary_pb2.Summary.Value(tag=info.tag, metadata=meta, tensor=tensor_proto(array))


def test_future_versions_and_malformed_records_are_skipped_with_a_warning(tmp_path):
    good, future = TagInfo("good", "Activation"), TagInfo("future", "Gradient")
    encoded = encode_record(record_of(crafted("float32")), ())
    future_content = create_summary_metadata("future", "Gradient").plugin_data.content.replace(
        f'"version":{PLAIN_VERSION}'.encode(), b'"version":99'
    )
    other = summary_pb2.Summary.Value(
        tag="loss",
        metadata=summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
        ),
        simple_value=1.0,
    )
    without_metadata = _value(good, encoded)
    without_metadata.ClearField("metadata")
    write_raw_events(
        tmp_path,
        [
            (0, _value(good, encoded)),
            (0, _value(future, encoded, future_content)),
            (1, _value(future, encoded)),  # later metadata is ignored, as TensorBoard does
            (0, other),
            (1, without_metadata),
            (2, summary_pb2.Summary.Value(tag=good.tag, tensor=tensor_proto(encoded[:-3]))),
            (3, without_metadata),
        ],
    )
    with pytest.warns(DataWarning) as caught:
        df = read_frame(tmp_path)
    messages = [str(w.message) for w in caught]
    assert any("'tandv/Gradient/future'" in m and "upgrade tandv_tb" in m for m in messages)
    assert any("malformed record" in m and "step 2" in m for m in messages)
    assert len(messages) == 2  # one warning per refused tag, not one per record
    assert _steps(df) == [0, 1, 3] and set(df[("metadata", "name")]) == {"good"}


# ------------------------------------------------------------------ validate


@pytest.mark.parametrize(
    ("breakage", "column"),
    [
        (lambda df: df.drop(columns=[("metadata", "run")]), "run"),
        (lambda df: df.drop(columns=[("exponent_counts", POS)]), "inf"),
        (lambda df: df.rename(columns={"dtype": "dt"}, level=1), "dtype"),
        (lambda df: set_first(df, ("metadata", "dtype"), "int8"), "dtype"),
        (lambda df: set_first(df, ("metadata", "tensor_type"), "Weights"), "tensor_type"),
        (lambda df: set_first(df, ("metadata", "step"), -1), "step"),
        (lambda df: set_first(df, ("metadata", "step"), 1.5), "step"),
        (lambda df: set_first(df, ("metadata", "name"), ""), "name"),
        (lambda df: set_first(df, ("metadata", "name"), 3), "name"),
        (lambda df: set_first(df, ("scalar_stats", "mean"), "big"), "mean"),
        (lambda df: set_first(df, ("exponent_counts", 0), 0.5), "0"),
        (lambda df: set_first(df, ("exponent_counts", 0), 10**6), "exponent_counts"),
        (lambda df: set_first(df, ("exponent_counts", NEG), -1), "inf"),
        (lambda df: df.rename(columns={"metadata": "meta"}, level=0), "metadata"),
        (lambda df: df.droplevel(0, axis=1), "MultiIndex"),
    ],
)
def test_validate_names_the_broken_column(tmp_path, breakage, column):
    df = small_frame(tmp_path)
    validate(df)
    with pytest.raises(SchemaError, match=column):
        validate(breakage(df.copy()))
    assert issubclass(SchemaError, ValueError)


def test_ml_dtypes_names_are_accepted_as_frame_dtypes(tmp_path):
    values = np.linspace(-3, 3, 50).astype(ml_dtypes.float8_e4m3fn)
    write_records(tmp_path, [("q", "Activation", 0, values)])
    df = read_frame(tmp_path)
    assert df[("metadata", "dtype")].iloc[0] == "float8_e4m3fn"
    assert list(df["exponent_counts"].columns) == [NEG, *range(-9, 9), POS]
