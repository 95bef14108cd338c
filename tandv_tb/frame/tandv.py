"""tandv interop: ``write_frame`` (our frames and tandv logframes to event files) and
``to_tandv`` (our frames in tandv's exact column set); the mapping is in ``tandv_tb.frame``."""

from __future__ import annotations

import itertools
import os
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd

from tandv_tb import formats as fmt
from tandv_tb.event_files.metadata import is_tensor_type
from tandv_tb.event_files.record import STATISTICS, NumericsRecord
from tandv_tb.frame.schema import (
    EXP,
    META,
    NEG_INF,
    POS_INF,
    SCALAR,
    SchemaError,
    check_dtypes,
    check_exponent_counts,
    check_ints,
    check_strings,
    column_error,
    exponent_columns,
    validate,
)
from tandv_tb.writer import NumericsWriter, RecordItem

TANDV_METADATA = ("step", "name", "type", "tensor_type", "dtype")
TANDV_STATISTICS = ("mean", "std", "mean_abs", "max_abs", "min_abs", "rm2", "rm4", "rm8")
TANDV_EXPONENTS = range(-16, 17)
#: Our bin n is tandv's (frexp) label e minus one.
TANDV_BIN_SHIFT = -1
_TANDV_TO_OURS = {"Weights": "Weight", "Weight_Gradients": "Weight_Gradient"}
_OURS_TO_TANDV = {v: k for k, v in _TANDV_TO_OURS.items()}


def _load(frame: pd.DataFrame | str | os.PathLike) -> pd.DataFrame:
    if isinstance(frame, pd.DataFrame):
        return frame
    if isinstance(frame, (str, os.PathLike)):
        loaded = pd.read_pickle(frame)
        if not isinstance(loaded, pd.DataFrame):
            raise SchemaError(f"{str(frame)!r} holds a {type(loaded).__name__}, not a DataFrame")
        return loaded
    raise TypeError(
        f"expected a DataFrame or the path of a pickled one, got {type(frame).__name__}"
    )


def _is_tandv(df: pd.DataFrame) -> bool:
    columns = set(df.columns) if isinstance(df.columns, pd.MultiIndex) else set()
    return (META, "run") not in columns and (META, "order") not in columns


def _validate_tandv(df: pd.DataFrame) -> None:
    """tandv's own schema: its 5 metadata columns, numeric stats, int exponent counts."""
    ints, labels = exponent_columns(df)
    for column in TANDV_METADATA:
        if (META, column) not in df.columns:
            raise column_error((META, column), "is missing")
    check_strings(df, (META, "name"), allow_empty=False)
    check_strings(df, (META, "tensor_type"))
    check_strings(df, (META, "dtype"))
    check_ints(df, (META, "step"))
    check_dtypes(df, (META, "dtype"))
    mapped = df[(META, "tensor_type")].map(lambda t: _TANDV_TO_OURS.get(t, t))
    bad = [t for t in pd.unique(mapped) if not is_tensor_type(t)]
    if bad:
        raise column_error((META, "tensor_type"), f"unknown tensor types {bad}")
    check_exponent_counts(df)


def _module_type(value: object) -> str:
    if not isinstance(value, str):
        return ""
    match = re.fullmatch(r"<class '(?:[\w.]*\.)?(\w+)'>", value)
    return match.group(1) if match else value


def _column_or(df: pd.DataFrame, column: tuple, default: float | int) -> np.ndarray:
    if column in df.columns:
        return df[column].to_numpy()
    return np.full(len(df), default)


def _frame_records(df: pd.DataFrame, tandv: bool) -> list[NumericsRecord]:
    """One NumericsRecord per row (rules in the module doc)."""
    ints, _ = exponent_columns(df)
    shift = TANDV_BIN_SHIFT if tandv else 0
    matrix = df[EXP][ints].to_numpy(np.int64) if ints else np.zeros((len(df), 0), np.int64)
    low, high = df[(EXP, NEG_INF)].to_numpy(np.int64), df[(EXP, POS_INF)].to_numpy(np.int64)
    zeros = _column_or(df, (SCALAR, "zero_count"), 0).astype(np.int64)
    posinf = _column_or(df, (SCALAR, "posinf_count"), 0).astype(np.int64)
    neginf = _column_or(df, (SCALAR, "neginf_count"), 0).astype(np.int64)
    nan = _column_or(df, (SCALAR, "nan_count"), 0).astype(np.int64)
    low_extra, high_extra = low - zeros, high - posinf - neginf
    if (low_extra < 0).any():
        raise column_error((EXP, NEG_INF), "holds fewer values than zero_count")
    if (high_extra < 0).any():
        raise column_error((EXP, POS_INF), "holds fewer values than posinf + neginf counts")
    total = nan + low + high + matrix.sum(axis=1)
    numel = _column_or(df, (SCALAR, "numel"), -1).astype(np.int64)
    numel = np.where(numel < 0, total, numel)
    if (numel != total).any():
        raise column_error((SCALAR, "numel"), "differs from the sum of the exponent counts")
    stats = {name: _column_or(df, (SCALAR, name), np.nan).astype(np.float64) for name in STATISTICS}
    if tandv:  # sample -> population standard deviation
        n = numel.astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            stats["std"] = np.where(n > 1, stats["std"] * np.sqrt((n - 1) / n), np.nan)
    first = (ints[0] if ints else 0) + shift - 1
    last = (ints[-1] if ints else 0) + shift + 1
    dtypes = [fmt.canonical_name(d) for d in df[(META, "dtype")]]
    records = []
    for i, dtype in enumerate(dtypes):
        info = fmt.info(dtype)
        full = np.zeros(info.n_bins, dtype=np.int64)
        where = (
            np.clip(
                np.array([first, *(x + shift for x in ints), last]),
                info.min_exponent,
                info.max_exponent,
            )
            - info.min_exponent
        )
        np.add.at(full, where, [low_extra[i], *matrix[i], high_extra[i]])
        nonzero = np.flatnonzero(full)
        lo, hi = (int(nonzero[0]), int(nonzero[-1])) if len(nonzero) else (0, -1)
        records.append(
            NumericsRecord(
                dtype=dtype,
                numel=int(numel[i]),
                zero_count=int(zeros[i]),
                nan_count=int(nan[i]),
                posinf_count=int(posinf[i]),
                neginf_count=int(neginf[i]),
                bins_lo=info.min_exponent + lo if len(nonzero) else 0,
                counts=full[lo : hi + 1].copy(),
                statistics={name: float(stats[name][i]) for name in STATISTICS},
            )
        )
    return records


def write_frame(frame: pd.DataFrame | str | os.PathLike, logdir: str | os.PathLike) -> None:
    """Write a frame (our schema, or a tandv logframe or its pickle's path) as numerics
    event files under ``logdir``: one run per distinct ``run`` value (tandv frames: into
    ``logdir`` itself).

    A frame read without a format round-trips exactly (the recorded formats' under/overflow
    excepted: a frame does not hold them). In a frame read with ``format=F``, the ``-inf``
    values beyond ``zero_count`` are written into the bin just below its lowest int column
    and the ``+inf`` values beyond the infinities into the bin just above its highest one
    (clamped into the dtype's range), as for tandv frames.
    """
    df = _load(frame).reset_index(drop=True)
    tandv = _is_tandv(df)
    if tandv:
        _validate_tandv(df)
    else:
        validate(df)
    records = _frame_records(df, tandv)
    tensor_types = df[(META, "tensor_type")].map(lambda t: _TANDV_TO_OURS.get(t, t))
    module_types = _column_or(df, (META, "type"), None)
    runs = df[(META, "run")].to_numpy() if not tandv else np.full(len(df), ".")
    orders = df[(META, "order")].to_numpy() if not tandv else _first_seen(df, tensor_types)
    steps = df[(META, "step")].to_numpy()
    by_run: dict[str, list[int]] = defaultdict(list)
    for i, run in enumerate(runs):
        by_run[_check_run(run)].append(i)
    for run, indices in by_run.items():
        indices.sort(key=lambda i: (steps[i], orders[i]))
        with NumericsWriter(Path(logdir) / run if run != "." else Path(logdir)) as writer:
            for step, rows in itertools.groupby(indices, key=lambda i: int(steps[i])):
                writer.add_records(
                    step,
                    [
                        RecordItem(
                            df[(META, "name")].iloc[i],
                            records[i],
                            tensor_types.iloc[i],
                            _module_type(module_types[i]),
                            int(orders[i]),
                        )
                        for i in rows
                    ],
                )


def _check_run(run: str) -> str:
    path = os.path.normpath(run)
    if os.path.isabs(path) or path == ".." or path.startswith(".." + os.sep):
        raise column_error((META, "run"), f"{run!r} is not a path inside the logdir")
    return path.replace(os.sep, "/")


def _first_seen(df: pd.DataFrame, tensor_types: pd.Series) -> np.ndarray:
    """Order of each row's tag by first appearance in the frame."""
    keys = list(zip(df[(META, "name")], tensor_types))
    order: dict[tuple, int] = {}
    for key in keys:
        order.setdefault(key, len(order))
    return np.array([order[key] for key in keys], dtype=np.int64)


def to_tandv(df: pd.DataFrame) -> pd.DataFrame:
    """The same rows with exactly tandv's columns (mapping in the module doc)."""
    validate(df)
    ints, _ = exponent_columns(df)
    out = {}
    for column in TANDV_METADATA:
        values = df[(META, column)]
        if column == "tensor_type":
            values = values.map(lambda t: _OURS_TO_TANDV.get(t, t))
        out[(META, column)] = values.reset_index(drop=True)
    finite = (
        _column_or(df, (SCALAR, "numel"), np.nan)
        - _column_or(df, (SCALAR, "nan_count"), 0)
        - _column_or(df, (SCALAR, "posinf_count"), 0)
        - _column_or(df, (SCALAR, "neginf_count"), 0)
    ).astype(np.float64)
    for name in TANDV_STATISTICS:
        values = _column_or(df, (SCALAR, name), np.nan).astype(np.float64)
        if name == "std":
            with np.errstate(invalid="ignore", divide="ignore"):
                values = np.where(finite > 1, values * np.sqrt(finite / (finite - 1)), np.nan)
        out[(SCALAR, name)] = pd.Series(values, dtype=np.float64)
    counts = {
        label: np.zeros(len(df), dtype=np.int64) for label in (NEG_INF, *TANDV_EXPONENTS, POS_INF)
    }
    counts[NEG_INF] += df[(EXP, NEG_INF)].to_numpy(np.int64)
    counts[POS_INF] += df[(EXP, POS_INF)].to_numpy(np.int64)
    for n in ints:
        label = n - TANDV_BIN_SHIFT
        label = NEG_INF if label < TANDV_EXPONENTS[0] else label
        label = POS_INF if label != NEG_INF and label > TANDV_EXPONENTS[-1] else label
        counts[label] += df[(EXP, n)].to_numpy(np.int64)
    for label, values in counts.items():
        out[(EXP, label)] = pd.Series(values, dtype=np.int64)
    frame = pd.DataFrame(out)
    frame.columns = pd.MultiIndex.from_tuples(list(out))
    return frame
