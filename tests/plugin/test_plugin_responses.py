"""The heatmap's binary matrix encoding (``responses.Matrix``), decoded as a client would."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tandv_tb.plugin.responses import Matrix, dumps
from tests.helpers.plugin import heatmap_values


def _round_trip(values: np.ndarray, present: np.ndarray) -> tuple[dict, list]:
    rows, columns = values.shape
    body = json.loads(
        dumps({"layers": [{}] * rows, "columns": [{}] * columns, "values": Matrix(values, present)})
    )
    return body["values"], heatmap_values(body)


@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (5, 9), (0, 4), (2, 0)])
def test_values_missing_cells_and_non_finite_values_survive(shape):
    rng = np.random.default_rng(sum(shape))
    values = rng.normal(0, 3, shape)
    values[rng.random(shape) < 0.2] = math.nan
    values[rng.random(shape) < 0.1] = math.inf
    values[rng.random(shape) < 0.1] = -math.inf
    present = rng.random(shape) > 0.3
    matrix, decoded = _round_trip(values, present)
    assert matrix["dtype"] == "float32" and matrix["shape"] == list(shape)
    assert (matrix["missing"] is None) == bool(present.all())
    for row, row_present, got in zip(values.tolist(), present.tolist(), decoded):
        for value, here, cell in zip(row, row_present, got):
            if not here:
                assert cell is None
            elif math.isnan(value):
                assert math.isnan(cell)
            else:
                assert cell == float(np.float32(value))


@pytest.mark.parametrize(
    "value",
    [1e300, 1e-300, -1e39, 2.0**24 + 1, 3.0 * 2**40 + 1],
    ids=["huge", "tiny", "beyond-float32", "integer-2**24+1", "big-integer"],
)
def test_float64_when_float32_would_change_a_value(value):
    values = np.array([[1.5, value], [-2.0, 0.0]])
    matrix, decoded = _round_trip(values, np.ones(values.shape, bool))
    assert matrix["dtype"] == "float64"
    assert decoded == values.tolist()


def test_float32_keeps_exact_integers_below_2_to_24_and_powers_of_two():
    values = np.array([[2.0**24 - 1, 2.0**40, 0.0, -(2.0**-126)]])
    matrix, decoded = _round_trip(values, np.ones(values.shape, bool))
    assert matrix["dtype"] == "float32" and decoded == values.tolist()
