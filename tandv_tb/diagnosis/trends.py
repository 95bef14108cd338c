"""The ``drift``, ``dead`` and ``loss_spike`` findings: what a tensor or the loss does
over the recorded steps."""

from __future__ import annotations

import dataclasses

import numpy as np

from tandv_tb.diagnosis.base import Finding, Thresholds
from tandv_tb.diagnosis.run_numerics import RunNumerics, first_stretches

#: The robust standard deviation of normal data is 1.4826 x its median absolute deviation.
MAD_TO_SIGMA = 1.4826
_DRIFT_METRICS = ("max_abs", "rm2")


@dataclasses.dataclass
class Drifts:
    """Every step-to-step jump that stands out, as parallel arrays (by row of arrival)."""

    rows: np.ndarray  # the row where the new value is seen
    metric: np.ndarray  # index into _DRIFT_METRICS
    jump: np.ndarray  # binades, signed
    typical: np.ndarray  # the tensor's median absolute change


def group_median(values: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """The median of ``values`` in each group (NaN for an empty group), all at once;
    ``groups`` ascending."""
    counts = np.bincount(groups, minlength=n_groups)
    medians = np.full(n_groups, np.nan)
    if len(values) and (counts == counts[0]).all():  # as many each: one matrix
        return np.median(values.reshape(n_groups, counts[0]), axis=1)
    order = np.lexsort((values, groups))
    sorted_values = values[order]
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    has = counts > 0
    low = starts[has] + (counts[has] - 1) // 2
    high = starts[has] + counts[has] // 2
    medians[has] = (sorted_values[low] + sorted_values[high]) / 2
    return medians


def find_drifts(numerics: RunNumerics, thresholds: Thresholds) -> Drifts:
    """Jumps of log2(max_abs) or log2(rm2) between consecutive recorded steps of a tensor
    that lie more than ``drift_z`` robust deviations from the tensor's median change and
    measure at least ``drift_min_binades``, once the tensor has ``drift_min_history``
    changes before the jump. Zeros and non-finite values break the chain (``dead`` and
    ``nonfinite`` report them)."""
    found = []
    same = numerics.tensor[1:] == numerics.tensor[:-1]
    for index, name in enumerate(_DRIFT_METRICS):
        values = numerics.columns[name]
        with np.errstate(divide="ignore", invalid="ignore"):
            x = np.where(values > 0, np.log2(values), np.nan)
        change = x[1:] - x[:-1]
        valid = np.flatnonzero(same & np.isfinite(change))
        groups = numerics.tensor[valid]
        n = len(numerics.tensors)
        median = group_median(change[valid], groups, n)
        deviation = group_median(np.abs(change[valid] - median[groups]), groups, n)
        spread = MAD_TO_SIGMA * deviation[groups]
        off = np.abs(change[valid] - median[groups])
        # how many valid changes the tensor had before this one
        before = np.arange(len(valid)) - np.searchsorted(groups, np.arange(n))[groups]
        jumps = (
            (off > thresholds.drift_z * spread)
            & (np.abs(change[valid]) >= thresholds.drift_min_binades)
            & (before >= thresholds.drift_min_history)
        )
        picked = valid[jumps]
        found.append(
            (picked + 1, np.full(len(picked), index), change[picked], median[groups[jumps]])
        )
    rows, metric, jump, typical = (np.concatenate(parts) for parts in zip(*found))
    order = np.argsort(rows, kind="stable")
    return Drifts(rows[order], metric[order], jump[order], np.abs(typical[order]))


def drift_findings(numerics: RunNumerics, drifts: Drifts) -> list[Finding]:
    """One ``drift`` per tensor: its first jump."""
    found = []
    tensors = numerics.tensor[drifts.rows]
    _, first = np.unique(tensors, return_index=True)
    for i in first.tolist():
        row = int(drifts.rows[i])
        g = int(numerics.tensor[row])
        info = numerics.tensors[g]
        step, previous = int(numerics.steps[row]), int(numerics.steps[row - 1])
        jump = float(drifts.jump[i])
        metric = _DRIFT_METRICS[int(drifts.metric[i])]
        found.append(
            Finding(
                numerics.run,
                step,
                "drift",
                "warning",
                info.tensor_type,
                info.name,
                jump,
                f"log2({metric}) of {info.tensor_type} {info.name!r} jumps by {jump:+.1f} "
                f"binades from step {previous} to step {step} (its median change between "
                f"recorded steps is {drifts.typical[i]:.2g})",
                metric=f"log2_{metric}",
            )
        )
    return found


def dead_findings(numerics: RunNumerics, thresholds: Thresholds) -> list[Finding]:
    """A tensor whose every value is 0 over at least ``dead_window`` consecutive recorded
    steps (a dead ReLU, a vanished gradient), from the first step of that stretch."""
    c = numerics.columns
    zero = (c["zero_count"] == c["numel"]) & (c["numel"] > 0)
    starts, sizes = first_stretches(zero, numerics.tensor, thresholds.dead_window)
    found = []
    for row, length in zip(starts.tolist(), sizes.tolist()):
        info = numerics.tensors[int(numerics.tensor[row])]
        end = int(numerics.steps[row + int(length) - 1])
        step = int(numerics.steps[row])
        found.append(
            Finding(
                numerics.run,
                step,
                "dead",
                "warning",
                info.tensor_type,
                info.name,
                float(length),
                f"{info.tensor_type} {info.name!r} is all zeros at {length} consecutive "
                f"recorded steps, {step} to {end}",
            )
        )
    return found


def loss_tag(scalars: dict) -> str | None:
    """The run's loss: the scalar tag ``loss``, else the shortest tag containing "loss"
    (any case; alphabetical among equals), else None."""
    if "loss" in scalars:
        return "loss"
    named = sorted((len(t), t) for t in scalars if "loss" in t.lower())
    return named[0][1] if named else None


def loss_spike_findings(
    numerics: RunNumerics,
    scalars: dict[str, tuple[np.ndarray, np.ndarray]],
    drifts: Drifts,
    thresholds: Thresholds,
) -> list[Finding]:
    """Steps where the loss rises more than ``loss_spike_z`` robust deviations and more than
    ``loss_spike_rise`` of the median above its previous ``loss_window`` values (a spike
    lasting several steps counts once), each linked to the earliest drift within
    ``loss_link_steps`` steps before it (in execution order among drifts of one step)."""
    tag = loss_tag(scalars)
    if tag is None:
        return []
    steps, values = scalars[tag]
    keep = np.isfinite(values)
    steps, values = steps[keep], values[keep]
    window = thresholds.loss_window
    if len(values) <= window:
        return []
    previous = np.lib.stride_tricks.sliding_window_view(values[:-1], window)
    median = np.median(previous, axis=1)
    spread = MAD_TO_SIGMA * np.median(np.abs(previous - median[:, None]), axis=1)
    current = values[window:]
    rise = current - median
    spike = (rise > thresholds.loss_spike_z * spread) & (
        rise > thresholds.loss_spike_rise * np.abs(median)
    )
    starts = np.flatnonzero(spike & ~np.concatenate(([False], spike[:-1])))
    drift_steps = numerics.steps[drifts.rows]
    drift_rank = numerics.rank[numerics.tensor[drifts.rows]]
    found = []
    for i in starts.tolist():
        step = int(steps[window + i])
        near = np.flatnonzero(
            (drift_steps <= step) & (drift_steps >= step - thresholds.loss_link_steps)
        )
        tensor_type = name = ""
        link = "no tensor drifted before it"
        if len(near):
            first = near[np.lexsort((drift_rank[near], drift_steps[near]))[0]]
            info = numerics.tensors[int(numerics.tensor[drifts.rows[first]])]
            tensor_type, name = info.tensor_type, info.name
            link = (
                f"the first drift before it: {tensor_type} {name!r} at step "
                f"{int(drift_steps[first])}"
            )
        found.append(
            Finding(
                numerics.run,
                step,
                "loss_spike",
                "info",
                tensor_type,
                name,
                float(current[i]),
                f"{tag} spikes to {current[i]:.4g} at step {step} (median of the previous "
                f"{window} values {median[i]:.4g}); {link}",
            )
        )
    return found
