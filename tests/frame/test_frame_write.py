"""write_frame and to_tandv: frames written back as event files, tandv's frames in and out."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from tandv_tb.frame import SchemaError, read_frame, to_tandv, validate, write_frame
from tests.helpers.event_io import check_tandv_schema, event_files, tandv_frame
from tests.helpers.frames import NEG, POS, row_counts, set_first, small_frame, write_records
from tests.helpers.frames import frame_warnings as frame_warnings  # noqa: F401 (autouse fixture)
from tests.helpers.reference import crafted

# ------------------------------------------------------------ write_frame / tandv


def test_write_frame_of_our_frame_round_trips(tmp_path):
    write_records(
        tmp_path / "src" / "r1", [("a", "Activation", s, crafted("float16")) for s in (0, 3)]
    )
    write_records(
        tmp_path / "src" / "r2", [("b", "Optimiser_State.exp_avg", 1, crafted("float64"))]
    )
    original = read_frame(tmp_path / "src")
    original.to_pickle(tmp_path / "frame.pkl")
    write_frame(tmp_path / "frame.pkl", tmp_path / "copy")
    assert sorted(p.parent.name for p in event_files(tmp_path / "copy")) == ["r1", "r2"]
    pd.testing.assert_frame_equal(read_frame(tmp_path / "copy"), original)


def test_write_frame_rejects_bad_input(tmp_path):
    df = small_frame(tmp_path / "src")
    df[("metadata", "run")] = "../outside"
    with pytest.raises(SchemaError, match="run"):
        write_frame(df, tmp_path / "dst")
    with pytest.raises(TypeError, match="DataFrame"):
        write_frame([1, 2], tmp_path / "dst")
    with pytest.raises(SchemaError, match="tensor_type"):
        write_frame(
            set_first(small_frame(tmp_path / "src2"), ("metadata", "tensor_type"), "Bias"),
            tmp_path / "dst",
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
    assert row_counts(frame.iloc[0]) == {1: 2, 2: 1, NEG: 1, POS: 1}
    write_frame(frame, tmp_path)
    ((_, row),) = read_frame(tmp_path).iterrows()
    # in range: exactly the reference bins; beyond tandv's range: the bins just past it
    assert row_counts(row) == {0: 2, 1: 1, -18: 1, 16: 1}
    assert row[("scalar_stats", "std")] == pytest.approx(np.float32(values).std(), rel=1e-6)
    assert math.isnan(row[("scalar_stats", "min_abs_nonzero")])


def test_to_tandv_of_recorded_numerics(tmp_path):
    values = np.array([0.0, 0.0, 1.0, 1.0, 2.0**-30, 2.0**40, np.inf, np.nan], np.float32)
    write_records(tmp_path, [("x", "Weight_Gradient", 4, values)])
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
    assert row_counts(df.iloc[0]) == {NEG: 3, 1: 2, POS: 2}
    finite = values[np.isfinite(values)].astype(np.float64)
    assert df[("scalar_stats", "std")].iloc[0] == pytest.approx(finite.std(ddof=1), rel=1e-6)
