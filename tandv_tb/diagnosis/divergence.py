"""The ``divergence`` finding: where two runs of the same model part."""

from __future__ import annotations

import itertools

import numpy as np

from tandv_tb.diagnosis.base import Finding, Thresholds
from tandv_tb.diagnosis.run_numerics import RunNumerics, metric_values


def divergence_findings(runs: list[RunNumerics], thresholds: Thresholds) -> list[Finding]:
    """For every pair of runs sharing (tensor type, name) tensors: the first step at which
    |metric(A) - metric(B)| passes ``divergence_threshold`` for a shared tensor, and the
    first such tensor in execution order (of run A). A value on one side only (0 against
    non-zero, whose log2 is -inf) counts as parting; NaN on either side does not."""
    found = []
    metric = thresholds.divergence_metric
    values = {r.run: metric_values(r.columns, metric) for r in runs}
    for a, b in itertools.combinations(sorted(runs, key=lambda r: r.run), 2):
        finding = _first_parting(a, b, values[a.run], values[b.run], thresholds)
        if finding is not None:
            found.append(finding)
    return found


def _first_parting(a: RunNumerics, b: RunNumerics, va, vb, thresholds) -> Finding | None:
    b_index: dict[tuple[str, str], int] = {}
    for g, info in enumerate(b.tensors):  # the first tag of a (type, name) stands for it
        b_index.setdefault((info.tensor_type, info.name), g)
    pair_of_a = np.full(len(a.tensors), -1)
    pair_of_b = np.full(len(b.tensors), -1)
    for g, info in enumerate(a.tensors):
        other = b_index.pop((info.tensor_type, info.name), None)
        if other is not None:
            pair_of_a[g], pair_of_b[other] = g, g  # a pair is named by A's tensor
    shared_a = np.flatnonzero(pair_of_a[a.tensor] >= 0)
    shared_b = np.flatnonzero(pair_of_b[b.tensor] >= 0)
    if not len(shared_a) or not len(shared_b):
        return None
    steps, step_index = np.unique(
        np.concatenate((a.steps[shared_a], b.steps[shared_b])), return_inverse=True
    )
    key_a = pair_of_a[a.tensor[shared_a]] * len(steps) + step_index[: len(shared_a)]
    key_b = pair_of_b[b.tensor[shared_b]] * len(steps) + step_index[len(shared_a) :]
    _, in_a, in_b = np.intersect1d(key_a, key_b, assume_unique=True, return_indices=True)
    rows_a, rows_b = shared_a[in_a], shared_b[in_b]
    with np.errstate(invalid="ignore"):
        difference = va[rows_a] - vb[rows_b]
        parted = np.abs(difference) > thresholds.divergence_threshold
    if not parted.any():
        return None
    hits = np.flatnonzero(parted)
    step = a.steps[rows_a[hits]].min()
    at = hits[a.steps[rows_a[hits]] == step]
    hit = at[np.argmin(a.rank[a.tensor[rows_a[at]]])]
    info = a.tensors[a.tensor[rows_a[hit]]]
    metric = thresholds.divergence_metric
    label = f"log2({metric[5:]})" if metric.startswith("log2_") else metric
    value_a, value_b = va[rows_a[hit]], vb[rows_b[hit]]
    return Finding(
        a.run,
        int(step),
        "divergence",
        "warning",
        info.tensor_type,
        info.name,
        float(difference[hit]),
        f"runs {a.run!r} and {b.run!r} part at step {int(step)}: {label} of "
        f"{info.tensor_type} {info.name!r} is {value_a:.4g} against {value_b:.4g} "
        f"(difference above {thresholds.divergence_threshold:g})",
        other_run=b.run,
    )
