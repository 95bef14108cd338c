"""What the read_frame and write_frame tests share (tests/frame/test_frame*.py; no tests here)."""

from __future__ import annotations

import math
import warnings

import pandas as pd
import pytest

from tandv_tb.frame import DataWarning, EstimateWarning, read_frame
from tandv_tb.writer import NumericsWriter
from tests.helpers.event_io import record_of, stored
from tests.helpers.reference import crafted

NEG, POS = -math.inf, math.inf


@pytest.fixture(autouse=True)
def frame_warnings():
    """A ``DataWarning`` or ``EstimateWarning`` the test does not expect fails it (autouse
    where a test module imports it)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        warnings.simplefilter("error", EstimateWarning)
        yield


def write_records(logdir, entries, formats=()):
    """entries: (name, tensor_type, step, values); returns the records written."""
    written = {}
    with NumericsWriter(logdir) as writer:
        for name, tensor_type, step, values in entries:
            record = record_of(values, formats)
            writer.add_record(name, record, step, tensor_type, module_type="Linear")
            written[(name, tensor_type, step)] = stored(record)
    return written


def row_counts(row: pd.Series) -> dict:
    """The counts of one frame row, as a dict of label -> count (non-zero only)."""
    return {label: int(c) for (top, label), c in row.items() if top == "exponent_counts" and c}


def small_frame(tmp_path) -> pd.DataFrame:
    write_records(tmp_path, [("l", "Activation", s, crafted("float32")) for s in range(2)])
    return read_frame(tmp_path)


def set_first(df: pd.DataFrame, column: tuple, value) -> pd.DataFrame:
    values = list(df[column])
    values[0] = value
    df[column] = pd.Series(
        values,
        index=df.index,
        dtype=object if isinstance(value, str) and not isinstance(values[-1], str) else None,
    )
    return df
