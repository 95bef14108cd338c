"""The plugin's columnar decoding against ``summary.decode_tensor``, step by step."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tandv_tb import formats as fmt
from tandv_tb.metadata import TagInfo
from tandv_tb.plugin.casts import cast_counts
from tandv_tb.plugin.columns import decode_arrays as decode_series
from tandv_tb.summary import decode_tensor, encode_record
from tests.plugin_helpers import make_record, stored

INFO = TagInfo("layers.0", "Activation", "Linear", 0, ("float8_e4m3fn", "bfloat16"))
DTYPES = ("float32", "float64", "bfloat16", "float16", "float8_e5m2")


def _encoded(seed: int, count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    kinds = ("normal", "normal", "empty", "nonfinite")
    return [
        encode_record(make_record(rng, DTYPES[i % 5], INFO.formats, kinds[i % 4]), INFO.formats)
        for i in range(count)
    ]


def _same_record(a, b) -> None:
    assert a == b, (a, b)


def test_every_row_equals_decode_tensor():
    values = _encoded(1, 60)
    steps = list(range(0, 120, 2))
    series = decode_series(steps, [float(s) for s in steps], values, INFO)
    assert series.steps.tolist() == steps
    for row, value in enumerate(values):
        _same_record(series.record(row), decode_tensor(value, INFO))


def test_rows_are_sorted_by_step_and_a_repeated_step_keeps_the_later_datum():
    values = _encoded(2, 5)
    series = decode_series([30, 10, 20, 10, 0], [0.0] * 5, values, INFO)
    assert series.steps.tolist() == [0, 10, 20, 30]
    _same_record(series.record(1), decode_tensor(values[3], INFO))
    _same_record(series.record(3), decode_tensor(values[0], INFO))


def test_take_and_nearest_row():
    values = _encoded(3, 6)
    series = decode_series([0, 10, 20, 30, 40, 50], [0.0] * 6, values, INFO)
    assert [series.nearest_row(s) for s in (0, 4, 5, 6, 49, 99)] == [0, 0, 0, 1, 5, 5]
    part = series.take(np.array([1, 4]))
    _same_record(part.record(1), decode_tensor(values[4], INFO))


def _corrupt(value: np.ndarray, how: int, where: int, amount: int) -> np.ndarray:
    value = value.copy()
    if how == 0:
        return value[: max(0, len(value) - 1 - where % 3)]  # truncated
    if how == 1:
        return np.append(value, amount)  # too long
    value[where % len(value)] += amount  # any field changed
    return value


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 1000),
    damage=st.lists(
        st.tuples(st.integers(0, 9), st.integers(0, 2), st.integers(0, 60), st.integers(-5, 5)),
        max_size=4,
    ),
)
def test_malformed_steps_are_skipped_exactly_where_decode_tensor_refuses(seed, damage):
    values = _encoded(seed, 10)
    for index, how, where, amount in damage:
        values[index] = _corrupt(values[index], how, where, amount or 1)
    series = decode_series(list(range(10)), [0.0] * 10, values, INFO)
    accepted = []
    for step, value in enumerate(values):
        with contextlib.suppress(ValueError):
            accepted.append((step, decode_tensor(value, INFO)))
    assert series.steps.tolist() == [step for step, _ in accepted]
    for row, (_, record) in enumerate(accepted):
        _same_record(series.record(row), record)


def test_wrong_shapes_and_dtypes_are_skipped():
    good = _encoded(4, 1)[0]
    odd = [good.astype(np.float64), good.reshape(1, -1), np.zeros(3, np.int64), good]
    series = decode_series([0, 1, 2, 3], [0.0] * 4, odd, INFO)
    assert series.steps.tolist() == [3]


def test_no_steps():
    series = decode_series([], [], [], INFO)
    assert len(series) == 0 and series.bins.size == 0


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64", "float16"])
@pytest.mark.parametrize(
    "target", ["float8_e5m2", "float8_e4m3fn", "float16", "float4_e2m1fn", "float8_e8m0fnu"]
)
def test_estimated_casts_equal_frame_format_split(dtype, target):
    from tandv_tb.frame import format_split

    rng = np.random.default_rng(7)
    records = [stored(make_record(rng, dtype, ())) for _ in range(40)]
    info = TagInfo("x", "Activation", "", 0, ())
    series = decode_series(
        list(range(40)), [0.0] * 40, [encode_record(r, ()) for r in records], info
    )
    casts = cast_counts(series, target)
    assert casts.exact == (fmt.info(target).name == dtype)
    for row, record in enumerate(records):
        low, bins, high, _ = format_split(record, target)
        under = low - record.zero_count
        over = high - record.posinf_count - record.neginf_count
        assert (casts.underflow[row], casts.overflow[row]) == (under, over), row


def test_recorded_formats_are_exact():
    values = _encoded(5, 8)
    series = decode_series(list(range(8)), [0.0] * 8, values, INFO)
    casts = cast_counts(series, "float8_e4m3fn")
    assert casts.exact
    expected = [decode_tensor(v, INFO).underflow["float8_e4m3fn"] for v in values]
    assert casts.underflow.tolist() == expected
