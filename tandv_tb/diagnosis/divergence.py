"""The ``divergence`` finding: where two runs of the same model part.

Only comparable runs are compared (``comparable``: they share most of their tensors), or
the one pair asked for. A run that holds the same values as another (an import of it, a
copy) would repeat that run's comparisons: it is compared through that run only, the one
recording more formats (then the first by name)."""

from __future__ import annotations

import dataclasses

import numpy as np

from tandv_tb.diagnosis.base import Finding, Thresholds, metric_label
from tandv_tb.diagnosis.comparable import Pair, pairs
from tandv_tb.diagnosis.run_numerics import RunNumerics, metric_values

_LISTED = 3  # pairs or runs named in a note before "and N more"


@dataclasses.dataclass
class Comparisons:
    """What ``divergence`` compared and what it left out: the findings, the pairs
    compared, each copy and the run it was compared through, the pairs left out."""

    findings: list[Finding]
    compared: list[Pair]
    copies: dict[str, str]
    unrelated: list[Pair]

    @property
    def left_out(self) -> bool:
        """Whether some pair of runs was not compared (the reader may ask for it)."""
        return bool(self.unrelated or self.copies)

    def note(self) -> str:
        """One sentence on which runs were compared and why the others were not ("" for
        fewer than two runs)."""
        parts = []
        if self.compared:
            parts.append("compared " + _some([f"{p.a} with {p.b}" for p in self.compared]))
        parts += [
            f"{copy} holds the same values as {of} (compared through it)"
            for copy, of in self.copies.items()
        ]
        alone = sorted(_alone(self.unrelated, self.compared, self.copies))
        if alone:
            its = "its" if len(alone) == 1 else "their"
            parts.append(
                f"not compared: {_some(alone)} share{'s' * (len(alone) == 1)} under half "
                f"of {its} tensors with every other run"
            )
        others = [p for p in self.unrelated if p.a not in alone and p.b not in alone]
        if others:
            named = _some([f"{p.a} with {p.b}" for p in others])
            parts.append(f"not compared (under half of their tensors shared): {named}")
        return "Divergence: " + "; ".join(parts) if parts else ""


def divergence_findings(
    runs: list[RunNumerics], thresholds: Thresholds, asked: tuple[str, str] | None = None
) -> Comparisons:
    """Every comparable pair of ``runs`` (or only ``asked``, comparable or not): the first
    step at which |metric(A) - metric(B)| passes ``divergence_threshold`` for a shared
    tensor, and the first such tensor in execution order (of run A). A value on one side
    only (0 against non-zero, whose log2 is -inf) counts as parting; NaN on either side
    does not."""
    by_run = {r.run: r for r in runs}
    metric = thresholds.divergence_metric
    values = {r.run: metric_values(r.columns, metric) for r in runs}
    every = pairs(runs)
    if asked is not None:
        chosen = [p for p in every if {p.a, p.b} == set(asked)]
        unrelated: list[Pair] = []
    else:
        chosen = [p for p in every if p.comparable]
        unrelated = [p for p in every if not p.comparable]
    found: dict[Pair, Finding] = {}
    same: list[Pair] = []
    for pair in chosen:
        a, b = by_run[pair.a], by_run[pair.b]
        rows_a, rows_b = _shared_rows(a, b)
        va, vb = values[a.run][rows_a], values[b.run][rows_b]
        if len(rows_a) == len(a) == len(b) and np.array_equal(va, vb, equal_nan=True):
            same.append(pair)
            continue
        finding = _first_parting(a, b, rows_a, rows_b, va, vb, thresholds)
        if finding is not None:
            found[pair] = finding
    copies = {} if asked is not None else _copies(same, by_run)
    compared = [p for p in chosen if p.a not in copies and p.b not in copies]
    listed = [found[p] for p in compared if p in found]
    return Comparisons(listed, compared, copies, unrelated)


def _shared_rows(a: RunNumerics, b: RunNumerics) -> tuple[np.ndarray, np.ndarray]:
    """The rows of A and of B that hold the same tensor (type, name) at the same step."""
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
        return shared_a[:0], shared_b[:0]
    steps, step_index = np.unique(
        np.concatenate((a.steps[shared_a], b.steps[shared_b])), return_inverse=True
    )
    key_a = pair_of_a[a.tensor[shared_a]] * len(steps) + step_index[: len(shared_a)]
    key_b = pair_of_b[b.tensor[shared_b]] * len(steps) + step_index[len(shared_a) :]
    _, in_a, in_b = np.intersect1d(key_a, key_b, assume_unique=True, return_indices=True)
    return shared_a[in_a], shared_b[in_b]


def _first_parting(a, b, rows_a, rows_b, va, vb, thresholds: Thresholds) -> Finding | None:
    with np.errstate(invalid="ignore"):
        difference = va - vb
        parted = np.abs(difference) > thresholds.divergence_threshold
    if not parted.any():
        return None
    hits = np.flatnonzero(parted)
    step = a.steps[rows_a[hits]].min()
    at = hits[a.steps[rows_a[hits]] == step]
    hit = at[np.argmin(a.rank[a.tensor[rows_a[at]]])]
    info = a.tensors[a.tensor[rows_a[hit]]]
    metric = thresholds.divergence_metric
    return Finding(
        a.run,
        int(step),
        "divergence",
        "warning",
        info.tensor_type,
        info.name,
        float(difference[hit]),
        f"runs {a.run!r} and {b.run!r} part at step {int(step)}: {metric_label(metric)} of "
        f"{info.tensor_type} {info.name!r} is {va[hit]:.4g} against {vb[hit]:.4g} "
        f"(difference above {thresholds.divergence_threshold:g})",
        other_run=b.run,
        metric=metric,
    )


def _copies(same: list[Pair], by_run: dict[str, RunNumerics]) -> dict[str, str]:
    """Each run that holds the same values as another, and the run it is compared
    through: of runs linked by ``same``, the one recording the most formats (the fuller
    record), then the first by name."""
    linked: dict[str, set[str]] = {}
    for pair in same:
        group = linked.get(pair.a, {pair.a}) | linked.get(pair.b, {pair.b})
        for run in group:
            linked[run] = group
    copies = {}
    for group in {frozenset(g) for g in linked.values()}:
        kept = min(group, key=lambda run: (-_recorded_formats(by_run[run]), run))
        copies.update({run: kept for run in sorted(group) if run != kept})
    return dict(sorted(copies.items()))


def _recorded_formats(numerics: RunNumerics) -> int:
    return sum(len(info.formats) for info in numerics.tensors)


def _alone(unrelated: list[Pair], compared: list[Pair], copies: dict[str, str]) -> set[str]:
    """The runs of ``unrelated`` that are comparable with no run (copies excepted)."""
    linked = {run for p in compared for run in (p.a, p.b)} | set(copies) | set(copies.values())
    return {run for p in unrelated for run in (p.a, p.b)} - linked


def _some(names: list[str]) -> str:
    """``names`` joined, the first few and how many more."""
    shown = ", ".join(names[:_LISTED])
    more = len(names) - _LISTED
    return f"{shown} and {more} more" if more > 0 else shown
