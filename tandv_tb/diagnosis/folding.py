"""The default view of the grouped findings: what the command line prints and the Findings
card shows first, with the expected effects of an unscaled format folded into one line
per run and format.

Folded are exactly the groups that the headline rule skips as expected of an unscaled
format (``headline.expected_of_unscaled``): the ``underflow`` groups and the ``scale``
groups that remedy them. Grouped by tensor type, as the contract asks, they are most of
a logdir's groups (a float8 run has one per tensor type and format, twice); folded, a
run and format takes one line, which says them with the numbers of all their tensors.
A run and format with a single such group shows that group itself. Nothing is dropped:
``tandv_tb.findings`` and ``--json`` list every group, ``--groups`` prints them, and the
card keeps them behind the fold's disclosure.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from tandv_tb.diagnosis.base import Thresholds, severity_rank
from tandv_tb.diagnosis.grouping import Group, group_order, underflow_sentence
from tandv_tb.diagnosis.headline import expected_of_unscaled
from tandv_tb.diagnosis.run_numerics import RunNumerics


@dataclasses.dataclass(frozen=True)
class Fold:
    """The folded groups of one run and format as one row of the default view, with the
    attributes of a ``Group`` that a row shows (``kind``: the condition's, ``underflow``;
    ``tensors``: how many tensors it holds; ``tensor_type`` empty: it spans several)."""

    run: str
    step: int
    kind: str
    severity: str
    format: str
    tensors: int
    message: str
    groups: tuple[Group, ...]
    tensor_type: str = ""


def folded(group: Group) -> bool:
    """Whether the default view folds ``group``."""
    return expected_of_unscaled(group.kind, group.remedies)


def default_view(
    groups: list[Group], numerics: dict[str, RunNumerics], thresholds: Thresholds
) -> list[Group | Fold]:
    """The rows of the default view, in ``group_order``: every group not folded, and one
    ``Fold`` per run and format of the folded ones (a lone one stays a group)."""
    shown: list[Group | Fold] = []
    by_format: dict[tuple[str, str], list[Group]] = {}
    for g in groups:
        if folded(g):
            by_format.setdefault((g.run, g.format), []).append(g)
        else:
            shown.append(g)
    for (run, _), together in by_format.items():
        conditions = [g for g in together if g.kind != "scale"]
        if len(together) == 1 or not conditions:
            shown.extend(together)
        else:
            shown.append(_fold(together, conditions, numerics[run], thresholds))
    return sorted(shown, key=group_order)


def _fold(together, conditions, run: RunNumerics, thresholds: Thresholds) -> Fold:
    """The ``Fold`` of ``together``: ``conditions`` (its ``underflow`` groups, the one
    kind expected of an unscaled format) told with the ``scale`` groups remedying them."""
    members = [f for g in conditions for f in g.findings]
    members.sort(key=lambda f: (f.step, run.rank_of(f.tensor_type, f.name)))
    remedy = [f for g in together if g.kind == "scale" for f in g.findings]
    kinds = Counter(g.kind for g in together)
    count = " and ".join(f"{n} {kind}" for kind, n in kinds.items())
    lead = f"{conditions[0].format} without a scale (expected)"
    message = underflow_sentence(members, remedy, run, thresholds, lead=lead)
    worst = min(together, key=lambda g: severity_rank(g.severity))
    return Fold(
        run=run.run,
        step=min(g.step for g in conditions),
        kind=conditions[0].kind,
        severity=worst.severity,
        format=conditions[0].format,
        tensors=sum(g.tensors for g in conditions),
        message=f"{message}; {count} groups, one per tensor type",
        groups=tuple(together),
    )
