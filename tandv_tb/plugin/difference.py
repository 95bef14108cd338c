"""Run against run: the heatmap's rows as metric(run) - metric(minus_run).

Layers are matched by (tensor type, name); a difference exists only at the steps both runs
recorded for that layer, so a cell is missing where either run lacks the step (or the other
run lacks the layer). Done on the server, before the columns are reduced, so a cell is the
reduction of per-step differences, never the difference of two reduced cells.
"""

from __future__ import annotations

import numpy as np
from tensorboard.errors import InvalidArgumentError

from tandv_tb.plugin import metrics
from tandv_tb.plugin.listing import RunIndex, TagEntry

Row = tuple[np.ndarray, np.ndarray]


def minus_index(query, index: RunIndex, tensor_type: str) -> RunIndex | None:
    """The run named by ``minus_run`` (404 if unknown or without ``tensor_type``), or None."""
    other = query.params.text("minus_run", required=False)
    if other is None:
        return None
    if other == index.run:
        raise InvalidArgumentError(f"minus_run must differ from run, both are {other!r}")
    other_index = query.run(other)
    other_index.layers(tensor_type)  # 404 naming the tensor type when the run lacks it
    return other_index


def subtract(
    query,
    other: RunIndex,
    tensor_type: str,
    entries: list[TagEntry],
    rows: list[Row],
    exact: list[bool],
    chosen: metrics.Metric,
    format_name: str | None,
) -> tuple[list[Row], list[bool]]:
    """Each row minus the same layer's row of ``other``, at the steps both recorded."""
    matched = [other.entries.get((tensor_type, e.info.name)) for e in entries]
    present = [m for m in matched if m is not None]
    needs = metrics.needs(chosen, format_name)
    by_tag = dict(zip((m.tag for m in present), query.series(other, present, needs)))
    out_rows, out_exact = [], []
    for (steps, values), is_exact, match in zip(rows, exact, matched):
        if match is None:
            out_rows.append((steps[:0], values[:0]))
            out_exact.append(is_exact)
            continue
        other_steps, other_values, other_exact = metrics.layer_values(
            by_tag[match.tag], chosen, format_name
        )
        common, mine, theirs = np.intersect1d(steps, other_steps, return_indices=True)
        a = values[mine].astype(np.float64)
        b = other_values[theirs].astype(np.float64)
        with np.errstate(invalid="ignore"):
            diff = np.where(a == b, 0.0, a - b)  # equal infinities (both all zeros) differ by 0
        out_rows.append((common, diff))
        out_exact.append(is_exact and other_exact)
    return out_rows, out_exact
