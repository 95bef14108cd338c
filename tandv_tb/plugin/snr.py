"""The quantization error of a block-scaled format as a signal-to-noise ratio in dB
(``record.snr_db``), of several records together.

A record holds the sums of squares of its finite values (``signal``) and of their
quantization errors (``error``), both in units of ``4**exponent`` (``record.BlockCounts``).
The SNR of several records together (a heatmap cell, a series point) is that of their
values together: the sums, each rescaled to the cell's largest ``exponent``, added up,
then one ratio. An average of dB would weigh a record of tiny values like one of large
values, and is never taken.
"""

from __future__ import annotations

import numpy as np

from tandv_tb.event_files.record import snr_db
from tandv_tb.formats import BlockFormat
from tandv_tb.plugin.downsample import Columns, reduce_rows, window
from tandv_tb.store.series import StepColumns

#: One row of records: (steps ascending, signal, error, exponent), each [S].
SumsRow = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def block_sums(series: StepColumns, format: BlockFormat) -> tuple[np.ndarray, ...]:
    """``(signal, error, exponent)`` of a block format at every step of ``series``."""
    return tuple(series.format_column(format, name) for name in ("signal", "error", "exponent"))


def pooled(
    columns: Columns, rows: list[SumsRow], how: str, low: int | None, high: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """``(values float64[R, C], present bool[R, C])``: each cell's SNR from the summed
    signal and error of the row's records at the steps of its column (``how == "last"``:
    of the last of them alone), as ``downsample.reduce_rows`` lays cells out."""
    if how == "last":
        per_step = [(steps, snr_db(signal, error)) for steps, signal, error, _ in rows]
        return reduce_rows(columns, per_step, "last", low, high)
    n_cols = len(columns)
    out = np.full((len(rows), n_cols), np.nan)
    present = np.zeros(out.shape, dtype=bool)
    keys, parts = [], []
    for index, (steps, *sums) in enumerate(rows):
        shown = window(steps, low, high)
        keys.append(index * n_cols + columns.column_of(steps[shown]))
        parts.append([np.asarray(values)[shown] for values in sums])
    if n_cols == 0 or not keys or not sum(len(k) for k in keys):
        return out, present
    key = np.concatenate(keys)  # ascending: rows in order, each row's steps ascending
    signal, error, exponent = (np.concatenate(p) for p in zip(*parts))
    starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
    sizes = np.diff(np.append(starts, len(key)))
    top = np.repeat(np.maximum.reduceat(exponent, starts), sizes)
    weight = np.ldexp(1.0, (2 * (exponent - top)).astype(np.int64))  # 4**(exponent - top)
    cells = key[starts]
    out.flat[cells] = snr_db(
        np.add.reduceat(signal * weight, starts), np.add.reduceat(error * weight, starts)
    )
    present.flat[cells] = True
    return out, present
