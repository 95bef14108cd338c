"""The numerics DataFrame schema (described in ``tandv_tb.frame``) and its validator."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tandv_tb import formats as fmt
from tandv_tb.event_files.metadata import is_tensor_type
from tandv_tb.event_files.record import COUNTS

META, SCALAR, EXP = "metadata", "scalar_stats", "exponent_counts"
NEG_INF, POS_INF = float("-inf"), float("inf")
METADATA_COLUMNS = ("name", "type", "tensor_type", "step", "dtype", "run", "order")
STR_COLUMNS = ("name", "type", "tensor_type", "dtype", "run")


class SchemaError(ValueError):
    """A DataFrame does not follow the numerics schema."""


def column_error(column: tuple, problem: str) -> SchemaError:
    return SchemaError(f"column {column!r}: {problem}")


def check_strings(df: pd.DataFrame, column: tuple, allow_empty: bool = True) -> None:
    values = df[column]
    if not pd.api.types.is_string_dtype(values) or values.isna().any():
        raise column_error(column, "must hold strings")
    if not allow_empty and (values == "").any():
        raise column_error(column, "must hold non-empty strings")


def check_ints(df: pd.DataFrame, column: tuple, minimum: int | None = 0) -> None:
    values = df[column]
    if not pd.api.types.is_integer_dtype(values) or pd.api.types.is_bool_dtype(values):
        raise column_error(column, f"must hold integers, has dtype {values.dtype}")
    if minimum is not None and len(values) and values.min() < minimum:
        raise column_error(column, f"must hold integers >= {minimum}")


def check_exponent_counts(df: pd.DataFrame) -> None:
    """Every ``exponent_counts`` column holds non-negative integers (checked as a block)."""
    block = df[EXP]
    for label, dtype in block.dtypes.items():
        if not pd.api.types.is_integer_dtype(dtype) or pd.api.types.is_bool_dtype(dtype):
            raise column_error((EXP, label), f"must hold integers, has dtype {dtype}")
    if len(block) and block.shape[1]:
        negative = (block.to_numpy() < 0).any(axis=0)
        if negative.any():
            label = block.columns[int(np.flatnonzero(negative)[0])]
            raise column_error((EXP, label), "must hold integers >= 0")


def check_dtypes(df: pd.DataFrame, column: tuple) -> None:
    for value in pd.unique(df[column]):
        try:
            fmt.numpy_dtype(value)
        except (TypeError, ValueError):
            raise column_error(column, f"{value!r} is not a float dtype name") from None


def exponent_columns(df: pd.DataFrame) -> tuple[list[int], list]:
    """The int labels (sorted) of ``exponent_counts``; SchemaError for bad labels."""
    if not isinstance(df.columns, pd.MultiIndex) or df.columns.nlevels != 2:
        raise SchemaError("columns must be a 2-level pandas MultiIndex")
    labels = [label for top, label in df.columns if top == EXP]
    for required in (NEG_INF, POS_INF):
        if required not in labels:
            raise column_error((EXP, required), "is missing")
    ints = []
    for label in labels:
        if isinstance(label, (int, np.integer)) and not isinstance(label, bool):
            ints.append(int(label))
        elif not (isinstance(label, float) and math.isinf(label)):
            raise column_error((EXP, label), "labels must be ints or the floats -inf/+inf")
    return sorted(ints), labels


def validate(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` itself if it follows the schema, else ``SchemaError`` naming the column."""
    if not isinstance(df, pd.DataFrame):
        raise SchemaError(f"expected a pandas DataFrame, got {type(df).__name__}")
    _, labels = exponent_columns(df)
    tops = list(df.columns.get_level_values(0).unique())
    for top in (META, SCALAR):
        if top not in tops:
            raise SchemaError(f"top-level column {top!r} is missing")
    for top in tops:
        if top not in (META, SCALAR, EXP):
            raise SchemaError(f"unknown top-level column {top!r}")
    for column in METADATA_COLUMNS:
        if (META, column) not in df.columns:
            raise column_error((META, column), "is missing")
    for column in df[META].columns:
        if column not in METADATA_COLUMNS:
            raise column_error((META, column), "is not a metadata column of the schema")
    for column in ("type", "run", "dtype", "tensor_type"):
        check_strings(df, (META, column))
    check_strings(df, (META, "name"), allow_empty=False)
    check_ints(df, (META, "step"))
    check_ints(df, (META, "order"), minimum=None)
    check_dtypes(df, (META, "dtype"))
    bad = [t for t in pd.unique(df[(META, "tensor_type")]) if not is_tensor_type(t)]
    if bad:
        raise column_error((META, "tensor_type"), f"unknown tensor types {bad}")
    for column in df[SCALAR].columns:
        values = df[(SCALAR, column)]
        if not pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
            raise column_error((SCALAR, column), "must be numeric")
    for name in COUNTS:
        if (SCALAR, name) in df.columns:
            check_ints(df, (SCALAR, name))
    check_exponent_counts(df)
    if (SCALAR, "numel") in df.columns:
        nan = df[(SCALAR, "nan_count")] if (SCALAR, "nan_count") in df.columns else 0
        total = df[EXP].sum(axis=1)
        broken = total != df[(SCALAR, "numel")] - nan
        if broken.any():
            row = int(np.flatnonzero(broken.to_numpy())[0])
            raise column_error(
                (EXP, "*"), f"row {row} adds up to {total.iloc[row]}, not numel - nan_count"
            )
    return df
