"""Columnar decoding (``record_columns``) against ``decode_tensor``, record by record,
and the plugin's cast estimates from decoded bins against ``read_frame``'s."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tandv_tb import formats as fmt
from tandv_tb.event_files.metadata import TagInfo
from tandv_tb.event_files.record_columns import decode_rows, decode_tensor, to_record
from tandv_tb.event_files.summary import encode_record, encode_varints
from tandv_tb.plugin.casts import cast_counts
from tandv_tb.store.series import Bins, LayerSeries
from tests.helpers.plugin import make_record, stored

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


def _decode(vectors: list, n_formats: int = len(INFO.formats)):
    """``decode_rows`` of vectors stored as varint bytes (None: a row without a vector)."""
    parts = [b"" if v is None else encode_varints(v) for v in vectors]
    sizes = np.array([-1 if v is None else len(p) for v, p in zip(vectors, parts)])
    contents = np.frombuffer(b"".join(parts), dtype=np.uint8)
    return decode_rows(contents, sizes, np.full(len(vectors), n_formats, dtype=np.int64))


def _series(info: TagInfo, vectors: list) -> LayerSeries:
    """A ``LayerSeries`` of every column of decoded vectors, as the store builds one."""
    rows = _decode(vectors, len(info.formats))
    columns = {"dtype_code": rows.dtype_codes, "numel": rows.counts[:, 0]}
    for k, name in enumerate(info.formats):
        columns[f"underflow:{name}"] = rows.casts[2 * k :: 2 * len(info.formats)]
        columns[f"overflow:{name}"] = rows.casts[2 * k + 1 :: 2 * len(info.formats)]
    bins = Bins(rows.bins_lo, rows.bin_starts, rows.bins)
    return LayerSeries(info.name, info.formats, np.arange(len(rows)), columns, bins)


def test_every_row_equals_decode_tensor():
    values = _encoded(1, 60)
    rows = _decode(values)
    assert rows.kept.tolist() == list(range(60))
    for row, value in enumerate(values):
        _same_record(to_record(rows, row, INFO.formats), decode_tensor(value, INFO))


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
    rows = _decode(values)
    accepted = []
    for step, value in enumerate(values):
        with contextlib.suppress(ValueError):
            accepted.append((step, decode_tensor(value, INFO)))
    assert rows.kept.tolist() == [step for step, _ in accepted]
    for row, (_, record) in enumerate(accepted):
        _same_record(to_record(rows, row, INFO.formats), record)


def test_rows_without_a_vector_and_short_vectors_are_skipped():
    good = _encoded(4, 1)[0]
    rows = _decode([None, np.zeros(3, np.int64), good[:-1], good])
    assert rows.kept.tolist() == [3]


def test_a_cut_varint_loses_only_its_row():
    good = encode_varints(_encoded(4, 1)[0])
    cut = good[:-1] + bytes([0x80])  # its last varint never ends
    contents = np.frombuffer(good + cut + good, dtype=np.uint8)
    sizes = np.array([len(good), len(cut), len(good)])
    rows = decode_rows(contents, sizes, np.full(3, len(INFO.formats)))
    assert rows.kept.tolist() == [0, 2]


def test_no_rows():
    rows = _decode([])
    assert len(rows) == 0 and rows.bins.size == 0


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64", "float16"])
@pytest.mark.parametrize(
    "target", ["float8_e5m2", "float8_e4m3fn", "float16", "float4_e2m1fn", "float8_e8m0fnu"]
)
def test_estimated_casts_equal_frame_format_split(dtype, target):
    from tandv_tb.frame import format_split

    rng = np.random.default_rng(7)
    records = [stored(make_record(rng, dtype, ())) for _ in range(40)]
    info = TagInfo("x", "Activation", "", 0, ())
    series = _series(info, [encode_record(r, ()) for r in records])
    casts = cast_counts(series, target)
    assert casts.exact == (fmt.info(target).name == dtype)
    for row, record in enumerate(records):
        low, bins, high, _ = format_split(record, target)
        under = low - record.zero_count
        over = high - record.posinf_count - record.neginf_count
        assert (casts.underflow[row], casts.overflow[row]) == (under, over), row


def test_recorded_formats_are_exact():
    values = _encoded(5, 8)
    series = _series(INFO, values)
    casts = cast_counts(series, "float8_e4m3fn")
    assert casts.exact
    expected = [decode_tensor(v, INFO).underflow["float8_e4m3fn"] for v in values]
    assert casts.underflow.tolist() == expected
