"""Every finding of some runs of a store, kind after kind, grouped, with a headline per
run and the default view of the groups."""

from __future__ import annotations

import dataclasses

from tandv_tb.diagnosis.base import Finding, Thresholds, sort_key
from tandv_tb.diagnosis.divergence import Comparisons, divergence_findings
from tandv_tb.diagnosis.first_nonfinite import nonfinite_findings
from tandv_tb.diagnosis.folding import Fold, default_view
from tandv_tb.diagnosis.grouping import Group, group
from tandv_tb.diagnosis.headline import Headline, headlines
from tandv_tb.diagnosis.low_precision import (
    clamp_findings,
    format_shares,
    overflow_findings,
    scale_findings,
    underflow_findings,
)
from tandv_tb.diagnosis.run_numerics import RunNumerics
from tandv_tb.diagnosis.trends import (
    dead_findings,
    drift_findings,
    find_drifts,
    loss_spike_findings,
)
from tandv_tb.store import NumericsStore


@dataclasses.dataclass
class Diagnosis:
    """The findings of some runs: one per tensor (``findings``), grouped (``groups``), each
    run's headline, which runs ``divergence`` compared, and the rows of the default view
    (``view``: the groups, those expected of an unscaled format folded). Findings, groups
    and rows are sorted by run, then step, the most severe first at one step."""

    findings: list[Finding]
    groups: list[Group]
    headlines: list[Headline]
    comparisons: Comparisons
    view: list[Group | Fold]


def run_findings(db: NumericsStore, numerics: RunNumerics, thresholds: Thresholds) -> list[Finding]:
    """The findings of one run (all kinds but ``divergence``)."""
    shares = format_shares(db, numerics)
    drifts = find_drifts(numerics, thresholds)
    return [
        *nonfinite_findings(db.nonfinite(numerics.run), numerics),
        *overflow_findings(numerics, shares, thresholds),
        *underflow_findings(numerics, shares, thresholds),
        *scale_findings(db, numerics, shares, thresholds),
        *clamp_findings(numerics, shares, thresholds),
        *drift_findings(numerics, drifts),
        *dead_findings(numerics, thresholds),
        *loss_spike_findings(numerics, db.scalars(numerics.run), drifts, thresholds),
    ]


def diagnose(
    db: NumericsStore,
    runs: list[str],
    thresholds: Thresholds,
    compare: tuple[str, str] | None = None,
) -> Diagnosis:
    """The findings of ``runs`` (each as of its last refresh) and the ``divergence`` of
    their comparable pairs; with ``compare``, ``runs`` are that pair, compared whatever
    they share."""
    extra = (thresholds.divergence_metric.removeprefix("log2_"),) if len(runs) > 1 else ()
    numerics = {run: RunNumerics.read(db, run, extra) for run in runs}
    found = [f for n in numerics.values() for f in run_findings(db, n, thresholds)]
    comparisons = divergence_findings(list(numerics.values()), thresholds, compare)
    found = sorted(found + comparisons.findings, key=sort_key)
    groups = group(found, numerics, thresholds)
    view = default_view(groups, numerics, thresholds)
    return Diagnosis(found, groups, headlines(found, numerics), comparisons, view)
