"""read_frame's format view: recorded formats split exactly as ml_dtypes casts, others estimated."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from tandv_tb import formats as fmt
from tandv_tb.event_files.record import STATISTICS, NumericsRecord
from tandv_tb.frame import EstimateWarning, format_split, read_frame
from tests.helpers.frames import NEG, POS, row_counts, write_records
from tests.helpers.frames import frame_warnings as frame_warnings  # noqa: F401 (autouse fixture)
from tests.helpers.reference import crafted, random_binades

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
    write_records(tmp_path, [("l", "Activation", 0, values)], formats=(format,))
    ((_, row),) = read_frame(tmp_path, format=format).iterrows()
    info = fmt.info(format)
    assert list(row["exponent_counts"].index) == [
        NEG,
        *range(info.min_exponent, info.max_exponent + 1),
        POS,
    ]
    assert row_counts(row) == _direct_view(values, format)
    assert (
        row["exponent_counts"].sum()
        == row[("scalar_stats", "numel")] - row[("scalar_stats", "nan_count")]
    )


def test_unrecorded_format_is_estimated_with_a_warning(tmp_path):
    """With one value per bin, mid-bin (1.5 * 2**n), the estimate rule is exact."""
    n = np.arange(-30, 30)
    values = np.concatenate([1.5 * np.exp2(n), -1.5 * np.exp2(n), [0.0, np.inf, np.nan]])
    values = values.astype(np.float32)
    write_records(tmp_path, [("l", "Activation", 0, values)], formats=("float16",))
    for format in ("float8_e4m3fn", "float8_e5m2", "float4_e2m1fn"):
        with pytest.warns(EstimateWarning, match=f"{format} was not recorded.*1 of 1"):
            df = read_frame(tmp_path, format=format)
        ((_, row),) = df.iterrows()
        assert row_counts(row) == _direct_view(values, format), format
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
