"""read_frame / validate / write_frame / to_tandv over real event files."""

from __future__ import annotations

import math
import time
import warnings

import ml_dtypes
import numpy as np
import pandas as pd
import pytest
from tensorboard.compat.proto import summary_pb2
from torch.utils.tensorboard import SummaryWriter

from tandv_tb import formats as fmt
from tandv_tb.event_files.metadata import PLAIN_VERSION, TagInfo, create_summary_metadata
from tandv_tb.event_files.record import COUNTS, STATISTICS, NumericsRecord
from tandv_tb.event_files.summary import encode_record
from tandv_tb.frame import (
    DataWarning,
    EstimateWarning,
    SchemaError,
    format_split,
    read_frame,
    to_tandv,
    validate,
    write_frame,
)
from tandv_tb.writer import NumericsWriter
from tests.helpers.event_io import (
    check_tandv_schema,
    event_files,
    record_of,
    stored,
    tandv_frame,
    tensor_proto,
    write_raw_events,
)
from tests.helpers.reference import crafted, random_binades

NEG, POS = -math.inf, math.inf


@pytest.fixture(autouse=True)
def _no_unexpected_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        warnings.simplefilter("error", EstimateWarning)
        yield


def _write(logdir, entries, formats=()):
    """entries: (name, tensor_type, step, values); returns the records written."""
    written = {}
    with NumericsWriter(logdir) as writer:
        for name, tensor_type, step, values in entries:
            record = record_of(values, formats)
            writer.add_record(name, record, step, tensor_type, module_type="Linear")
            written[(name, tensor_type, step)] = stored(record)
    return written


def _row_record(row: pd.Series) -> dict:
    """The counts of one frame row, as a dict of label -> count (non-zero only)."""
    return {label: int(c) for (top, label), c in row.items() if top == "exponent_counts" and c}


# ---------------------------------------------------------------------- reading


def test_round_trip_runs_order_and_values(tmp_path):
    a = random_binades("float32", 2000, seed=1)
    b = crafted("float16")
    written = _write(tmp_path, [("dec", "Activation", 1, a), ("enc", "Activation", 0, b)])
    # event files sort by the second they were opened in (then a per-process counter that
    # sorts as text): a new second makes the first writer's file sort first for certain
    time.sleep(1.1)
    written.update(_write(tmp_path, [("enc", "Activation", 2, a), ("dec", "Activation", 0, b)]))
    written.update(_write(tmp_path / "x" / "y", [("w", "Weight", 5, crafted("bfloat16"))]))
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
        assert _row_record(row) == expected


def test_column_dtypes(tmp_path):
    _write(tmp_path, [("a", "Gradient", 0, crafted("float32"))])
    df = read_frame(tmp_path)
    for column in ("name", "type", "tensor_type", "dtype", "run"):
        assert pd.api.types.is_string_dtype(df[("metadata", column)])
    for column in ("step", "order", *[("x", c) for c in ()]):
        assert df[("metadata", column)].dtype == np.int64
    assert all(df[("scalar_stats", c)].dtype == np.float64 for c in STATISTICS)
    assert all(df[("scalar_stats", c)].dtype == np.int64 for c in COUNTS)
    assert (df["exponent_counts"].dtypes == np.int64).all()


def test_run_filter(tmp_path):
    _write(tmp_path / "a", [("l", "Activation", 0, crafted("float32"))])
    _write(tmp_path / "b", [("l", "Activation", 0, crafted("float32"))])
    assert list(read_frame(tmp_path, run="b")[("metadata", "run")]) == ["b"]
    with pytest.raises(ValueError, match="no run 'c'.*'a', 'b'"):
        read_frame(tmp_path, run="c")


def test_missing_logdir_and_bad_format(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope"):
        read_frame(tmp_path / "nope")
    _write(tmp_path, [("l", "Activation", 0, crafted("float32"))])
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


# ----------------------------------------------------------------- format view

EXACT_FORMATS = (
    "float8_e4m3fn",
    "float8_e5m2",
    "float16",
    "bfloat16",
    "float8_e4m3fnuz",
    "float6_e3m2fn",
    "float4_e2m1fn",
    "float32",
)


def _direct_view(values: np.ndarray, format: str) -> dict:
    """The contract's format view computed straight from the values and real casts."""
    info = fmt.info(format)
    x = values.astype(np.float64).reshape(-1)
    finite = x[np.isfinite(x)]
    with np.errstate(over="ignore", invalid="ignore"):
        cast = fmt.cast_array(values.reshape(-1)[np.isfinite(x)], fmt.numpy_dtype(format))
    cast = cast.astype(np.float64)
    view = {NEG: int(np.sum(cast == 0)), POS: int(np.sum(~np.isfinite(cast)) + np.isinf(x).sum())}
    kept = finite[(cast != 0) & np.isfinite(cast)]
    n = np.clip(np.frexp(kept)[1] - 1, info.min_exponent, info.max_exponent)
    for b, c in zip(*np.unique(n, return_counts=True)):
        view[int(b)] = int(c)
    return {k: v for k, v in view.items() if v}


def _edge_values(source: str, format: str) -> np.ndarray:
    """Values around format's cast thresholds, in the source dtype, plus the usual mix."""
    t = fmt.cast_thresholds(source, format)
    dtype = fmt.numpy_dtype(source)
    edges = [v for v in (t.under_pos, t.over_pos) if 0 < v < math.inf]
    near = []
    uint = np.uint32 if dtype.itemsize == 4 else np.uint16
    for v in edges:
        bits = int(np.array([v], dtype=dtype).view(uint)[0])
        for d in (-2, -1, 0, 1, 2):
            near.append(np.array([bits + d], dtype=uint).view(dtype)[0])
    near = np.array(near, dtype=dtype)
    return np.concatenate([near, -near, crafted(source), random_binades(source, 3000, 80)])


@pytest.mark.parametrize("format", EXACT_FORMATS)
@pytest.mark.parametrize("source", ["float32", "bfloat16"])
def test_recorded_formats_split_exactly_as_ml_dtypes_casts(tmp_path, source, format):
    values = _edge_values(source, format)
    _write(tmp_path, [("l", "Activation", 0, values)], formats=(format,))
    ((_, row),) = read_frame(tmp_path, format=format).iterrows()
    info = fmt.info(format)
    assert list(row["exponent_counts"].index) == [
        NEG,
        *range(info.min_exponent, info.max_exponent + 1),
        POS,
    ]
    assert _row_record(row) == _direct_view(values, format)
    assert (
        row["exponent_counts"].sum()
        == row[("scalar_stats", "numel")] - row[("scalar_stats", "nan_count")]
    )


def test_unrecorded_format_is_estimated_with_a_warning(tmp_path):
    """With one value per bin, mid-bin (1.5 * 2**n), the estimate rule is exact."""
    n = np.arange(-30, 30)
    values = np.concatenate([1.5 * np.exp2(n), -1.5 * np.exp2(n), [0.0, np.inf, np.nan]])
    values = values.astype(np.float32)
    _write(tmp_path, [("l", "Activation", 0, values)], formats=("float16",))
    for format in ("float8_e4m3fn", "float8_e5m2", "float4_e2m1fn"):
        with pytest.warns(EstimateWarning, match=f"{format} was not recorded.*1 of 1"):
            df = read_frame(tmp_path, format=format)
        ((_, row),) = df.iterrows()
        assert _row_record(row) == _direct_view(values, format), format
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_frame(tmp_path, format="float16")  # recorded: no warning


def test_estimate_rule_splits_a_straddling_bin_log_uniformly():
    """float8_e4m3fn overflows from 464 = 2**8.858 up: 14.2% of bin 8 is over."""
    record = NumericsRecord(
        "float32", 1000, 0, 0, 0, 0, 8, np.array([1000]), dict.fromkeys(STATISTICS, 1.0)
    )
    low, bins, high, exact = format_split(record, "float8_e4m3fn")
    assert not exact
    assert high == round(1000 * (9 - math.log2(464)))
    assert bins[-1] == 1000 - high and low == 0


def test_exact_split_takes_underflow_from_the_bottom_and_overflow_from_the_top():
    record = NumericsRecord(
        "float32",
        30,
        5,
        0,
        1,
        2,
        -12,
        np.array([3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 6, 9]),
        dict.fromkeys(STATISTICS, 1.0),
        {"float8_e4m3fn": 5},
        {"float8_e4m3fn": 7},
    )
    low, bins, high, exact = format_split(record, "float8_e4m3fn")
    assert exact and low == 5 + 5 and high == 7 + 3
    # bins -12, -11 hold 7 values, 5 underflow, 2 clamp into -9; bins 9, 10 hold 15, 7 over
    assert bins[0] == 2 and bins[-1] == 8 and bins.sum() == 10


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


def _frame(tmp_path) -> pd.DataFrame:
    _write(tmp_path, [("l", "Activation", s, crafted("float32")) for s in range(2)])
    return read_frame(tmp_path)


@pytest.mark.parametrize(
    ("breakage", "column"),
    [
        (lambda df: df.drop(columns=[("metadata", "run")]), "run"),
        (lambda df: df.drop(columns=[("exponent_counts", POS)]), "inf"),
        (lambda df: df.rename(columns={"dtype": "dt"}, level=1), "dtype"),
        (lambda df: _set(df, ("metadata", "dtype"), "int8"), "dtype"),
        (lambda df: _set(df, ("metadata", "tensor_type"), "Weights"), "tensor_type"),
        (lambda df: _set(df, ("metadata", "step"), -1), "step"),
        (lambda df: _set(df, ("metadata", "step"), 1.5), "step"),
        (lambda df: _set(df, ("metadata", "name"), ""), "name"),
        (lambda df: _set(df, ("metadata", "name"), 3), "name"),
        (lambda df: _set(df, ("scalar_stats", "mean"), "big"), "mean"),
        (lambda df: _set(df, ("exponent_counts", 0), 0.5), "0"),
        (lambda df: _set(df, ("exponent_counts", 0), 10**6), "exponent_counts"),
        (lambda df: _set(df, ("exponent_counts", NEG), -1), "inf"),
        (lambda df: df.rename(columns={"metadata": "meta"}, level=0), "metadata"),
        (lambda df: df.droplevel(0, axis=1), "MultiIndex"),
    ],
)
def test_validate_names_the_broken_column(tmp_path, breakage, column):
    df = _frame(tmp_path)
    validate(df)
    with pytest.raises(SchemaError, match=column):
        validate(breakage(df.copy()))
    assert issubclass(SchemaError, ValueError)


def _set(df: pd.DataFrame, column: tuple, value) -> pd.DataFrame:
    values = list(df[column])
    values[0] = value
    df[column] = pd.Series(
        values,
        index=df.index,
        dtype=object if isinstance(value, str) and not isinstance(values[-1], str) else None,
    )
    return df


# ------------------------------------------------------------ write_frame / tandv


def test_write_frame_of_our_frame_round_trips(tmp_path):
    _write(tmp_path / "src" / "r1", [("a", "Activation", s, crafted("float16")) for s in (0, 3)])
    _write(tmp_path / "src" / "r2", [("b", "Optimiser_State.exp_avg", 1, crafted("float64"))])
    original = read_frame(tmp_path / "src")
    original.to_pickle(tmp_path / "frame.pkl")
    write_frame(tmp_path / "frame.pkl", tmp_path / "copy")
    assert sorted(p.parent.name for p in event_files(tmp_path / "copy")) == ["r1", "r2"]
    pd.testing.assert_frame_equal(read_frame(tmp_path / "copy"), original)


def test_write_frame_rejects_bad_input(tmp_path):
    df = _frame(tmp_path / "src")
    df[("metadata", "run")] = "../outside"
    with pytest.raises(SchemaError, match="run"):
        write_frame(df, tmp_path / "dst")
    with pytest.raises(TypeError, match="DataFrame"):
        write_frame([1, 2], tmp_path / "dst")
    with pytest.raises(SchemaError, match="tensor_type"):
        write_frame(
            _set(_frame(tmp_path / "src2"), ("metadata", "tensor_type"), "Bias"), tmp_path / "dst"
        )


def _tandv_rows() -> list[dict]:
    rng = np.random.default_rng(3)
    rows = []
    linear = "<class 'torch.nn.modules.linear.Linear'>"
    for step in range(3):
        for name, module, tensor_type in [
            ("layers.0", linear, "Activation"),
            ("layers.0", linear, "Gradient"),
            ("layers.0", None, "Weights"),
            ("layers.0", None, "Weight_Gradients"),
            ("layers.0", None, "Optimiser_State.exp_avg_sq"),
        ]:
            values = rng.standard_normal(500) * 2.0 ** rng.integers(-25, 25, 500)
            rows.append(
                {
                    "step": step,
                    "name": name,
                    "type": module,
                    "tensor_type": tensor_type,
                    "values": values.astype(np.float32),
                }
            )
    return rows


def test_tandv_frame_in_and_back_out(tmp_path):
    rows = _tandv_rows()
    original = tandv_frame(rows)
    check_tandv_schema(original)
    original.to_pickle(tmp_path / "final_logframe.pkl")
    write_frame(tmp_path / "final_logframe.pkl", tmp_path / "logs")
    ours = validate(read_frame(tmp_path / "logs"))
    assert set(ours[("metadata", "tensor_type")]) == {
        "Activation",
        "Gradient",
        "Weight",
        "Weight_Gradient",
        "Optimiser_State.exp_avg_sq",
    }
    assert set(ours[("metadata", "type")]) == {"Linear", ""}
    orders = dict(zip(ours[("metadata", "tensor_type")], ours[("metadata", "order")]))
    assert orders == {
        "Activation": 0,
        "Gradient": 1,
        "Weight": 2,
        "Weight_Gradient": 3,
        "Optimiser_State.exp_avg_sq": 4,
    }
    back = to_tandv(ours)
    check_tandv_schema(back)
    key = [("metadata", "step"), ("metadata", "name"), ("metadata", "tensor_type")]
    back = back.sort_values(key).reset_index(drop=True)
    original = original.sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(back["exponent_counts"], original["exponent_counts"])
    for column in ("step", "name", "tensor_type", "dtype"):
        assert list(back[("metadata", column)]) == list(original[("metadata", column)])
    pd.testing.assert_frame_equal(back["scalar_stats"], original["scalar_stats"], rtol=1e-6)


def test_tandv_bins_become_ours_shifted_by_one(tmp_path):
    """tandv's label e counts 2**(e-1) <= |x| < 2**e (frexp): our bin e - 1."""
    values = np.array([1.0, 1.5, -3.0, 2.0**-20, 2.0**20], dtype=np.float32)
    frame = tandv_frame(
        [{"step": 0, "name": "x", "type": None, "tensor_type": "Activation", "values": values}]
    )
    assert _row_record(frame.iloc[0]) == {1: 2, 2: 1, NEG: 1, POS: 1}
    write_frame(frame, tmp_path)
    ((_, row),) = read_frame(tmp_path).iterrows()
    # in range: exactly the reference bins; beyond tandv's range: the bins just past it
    assert _row_record(row) == {0: 2, 1: 1, -18: 1, 16: 1}
    assert row[("scalar_stats", "std")] == pytest.approx(np.float32(values).std(), rel=1e-6)
    assert math.isnan(row[("scalar_stats", "min_abs_nonzero")])


def test_to_tandv_of_recorded_numerics(tmp_path):
    values = np.array([0.0, 0.0, 1.0, 1.0, 2.0**-30, 2.0**40, np.inf, np.nan], np.float32)
    _write(tmp_path, [("x", "Weight_Gradient", 4, values)])
    df = to_tandv(read_frame(tmp_path))
    check_tandv_schema(df)
    assert list(df["exponent_counts"].columns) == [NEG, *range(-16, 17), POS]
    assert list(df["scalar_stats"].columns) == [
        "mean",
        "std",
        "mean_abs",
        "max_abs",
        "min_abs",
        "rm2",
        "rm4",
        "rm8",
    ]
    assert df[("metadata", "tensor_type")].iloc[0] == "Weight_Gradients"
    # zeros and 2**-30 in -inf; 1.0 in label 1 (frexp); 2**40 and +inf in +inf; NaN dropped
    assert _row_record(df.iloc[0]) == {NEG: 3, 1: 2, POS: 2}
    finite = values[np.isfinite(values)].astype(np.float64)
    assert df[("scalar_stats", "std")].iloc[0] == pytest.approx(finite.std(ddof=1), rel=1e-6)


def test_ml_dtypes_names_are_accepted_as_frame_dtypes(tmp_path):
    values = np.linspace(-3, 3, 50).astype(ml_dtypes.float8_e4m3fn)
    _write(tmp_path, [("q", "Activation", 0, values)])
    df = read_frame(tmp_path)
    assert df[("metadata", "dtype")].iloc[0] == "float8_e4m3fn"
    assert list(df["exponent_counts"].columns) == [NEG, *range(-9, 9), POS]
