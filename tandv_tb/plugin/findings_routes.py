"""The ``findings`` route: what went wrong in the ticked runs, for the tab's Findings card.

Computed by the findings engine (``tandv_tb.diagnosis``) over every recorded step, from the
plugin's own store, with the default thresholds; ``divergence`` for the comparable pairs of
the runs. Each finding says where the heatmap shows it (run, tensor type, metric, format),
so that a click, or the tab's first view, opens there. The groups are all there; ``folds``
says which of them the card's first level folds into one line, as the command line's
default output does (``tandv_tb.diagnosis.folding``).
"""

from __future__ import annotations

import dataclasses
import math

from tensorboard.errors import InvalidArgumentError

from tandv_tb.diagnosis.analysis import diagnose
from tandv_tb.diagnosis.base import Finding, Thresholds, severity_rank
from tandv_tb.diagnosis.folding import Fold
from tandv_tb.plugin.metrics import METRICS

#: At most this many runs a request (their pairs are compared).
MAX_RUNS = 64
DEFAULTS = Thresholds()
_MINUS_HINT = " (the heatmap's minus menu subtracts any two runs)"
#: The heatmap metric that shows a finding of each kind (``Finding.metric`` first).
KIND_METRICS = {
    "nonfinite": "nonfinite_count",
    "overflow": "overflow_fraction",
    "underflow": "underflow_fraction",
    "dead": "zero_fraction",
    "loss_spike": "log2_rm2",
    "drift": "log2_rm2",
    "divergence": "log2_rm2",
}


def runs_of(params) -> list[str]:
    """The ``run`` parameters, sorted (400 for more than ``MAX_RUNS``)."""
    runs = params.texts("run", required=True)
    if len(runs) > MAX_RUNS:
        raise InvalidArgumentError(f"at most {MAX_RUNS} runs a request, got {len(runs)}")
    return sorted(runs)


def check_runs(query, runs: list[str]) -> None:
    """404 for a run that holds no numerics."""
    for run in runs:
        query.run(run)


def heatmap_metric(finding: Finding) -> str:
    """The heatmap metric that shows ``finding`` (a ``scale`` that scales up remedies an
    underflow, one that scales down an overflow; a block format's blocks that clamp)."""
    if finding.kind == "scale" and finding.format.scales_itself:
        return "clamped_block_fraction"
    if finding.kind == "scale":
        return "overflow_fraction" if finding.value < 0 else "underflow_fraction"
    metric = finding.metric or KIND_METRICS[finding.kind]
    return metric if metric in METRICS else KIND_METRICS[finding.kind]


def _listed(finding: Finding) -> dict:
    row = {
        **finding.row(),
        "other_run": finding.other_run or None,
        "metric": heatmap_metric(finding),
        "format": finding.format or None,
    }
    row["value"] = None if math.isnan(row["value"]) else row["value"]
    return row


def _most_severe_first(item) -> tuple:
    return (severity_rank(item.severity), item.run, item.step)


def _fold(fold: Fold, group_index: dict[int, int]) -> dict:
    return {
        "run": fold.run,
        "step": fold.step,
        "kind": fold.kind,
        "severity": fold.severity,
        "format": fold.format,
        "tensors": fold.tensors,
        "message": fold.message,
        "groups": sorted(group_index[id(g)] for g in fold.groups),
    }


def findings(query, runs: list[str]) -> dict:
    found = diagnose(query.numerics(), runs, DEFAULTS)
    ordered = sorted(found.findings, key=_most_severe_first)
    index = {id(f): i for i, f in enumerate(ordered)}
    groups = []
    sorted_groups = sorted(found.groups, key=_most_severe_first)
    for g in sorted_groups:
        row = g.row()
        row["value"] = None if math.isnan(row["value"]) else row["value"]
        groups.append({**row, "findings": [index[id(f)] for f in g.findings]})
    group_index = {id(g): i for i, g in enumerate(sorted_groups)}
    folds = [
        _fold(row, group_index)
        for row in sorted(found.view, key=_most_severe_first)
        if isinstance(row, Fold)
    ]
    headlines = [
        {
            "run": h.run,
            "message": h.message,
            "finding": None if h.finding is None else index[id(h.finding)],
        }
        for h in found.headlines
    ]
    return {
        "runs": runs,
        "headlines": headlines,
        "groups": groups,
        "folds": folds,
        "findings": [_listed(f) for f in ordered],
        "compared": found.comparisons.note() + _MINUS_HINT * found.comparisons.left_out,
        "thresholds": dataclasses.asdict(DEFAULTS),
    }
