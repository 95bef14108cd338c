"""The default view of the grouped findings: what the command line prints and the Findings
card shows first, with the expected effects of an unscaled format folded into one line
per run and format.

Folded are exactly the groups that the headline rule skips as expected of a format
(``headline.expected_of_format``): the ``underflow`` groups and the ``scale`` groups that
remedy them, and every group of a block-scaled format (its underflow, the values its
scale rule saturates, its blocks whose scale clamps: what the format would do, told in
one line per run and format). Grouped by tensor type, as the contract asks, they are most of
a logdir's groups (a float8 run has one per tensor type and format, twice); folded, a
run and format takes one line, which says them with the numbers of all their tensors.
A run and format with a single such group shows that group itself. Nothing is dropped:
``tandv_tb.findings`` and ``--json`` list every group, ``--groups`` prints them, and the
card keeps them behind the fold's disclosure.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import Counter

from tandv_tb import block_formats
from tandv_tb.block_formats import FLOOR
from tandv_tb.diagnosis.base import Thresholds, percent, severity_rank
from tandv_tb.diagnosis.grouping import Group, group_order, underflow_sentence
from tandv_tb.diagnosis.headline import expected_of_format
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
    return expected_of_format(group.kind, group.format, group.remedies)


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
    for (run, format_name), together in by_format.items():
        conditions = [g for g in together if g.kind != "scale"]
        if len(together) == 1:
            shown.extend(together)
        elif block_formats.is_block_format(format_name):
            shown.append(_block_fold(together, numerics[run], thresholds))
        elif not conditions:
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


#: A block format's kinds of findings, in the order its fold tells them.
_BLOCK_KINDS = ("underflow", "overflow", "scale")


def _block_fold(together: list[Group], run: RunNumerics, thresholds: Thresholds) -> Fold:
    """The ``Fold`` of a block-scaled format's groups: its underflow, the values its scale
    rule saturates and its blocks whose scale clamps, each with the numbers of all its
    tensors."""
    by_kind: dict[str, list] = {}
    for g in together:
        by_kind.setdefault(g.kind, []).extend(g.findings)
    for members in by_kind.values():
        members.sort(key=lambda f: (f.step, run.rank_of(f.tensor_type, f.name)))
    format_name = together[0].format
    lead = f"{format_name}, block-scaled (what it would lose)"
    parts = []
    if "underflow" in by_kind:
        parts.append(underflow_sentence(by_kind["underflow"], [], run, thresholds, lead=lead))
    for kind, what in (
        ("overflow", "round{s} values down to their block's largest element value"),
        ("scale", "ha{ve} blocks whose scale clamps"),
    ):
        members = by_kind.get(kind)
        if not members:
            continue
        n = len({(f.tensor_type, f.name) for f in members})
        verb = what.format(s="" if n > 1 else "s", ve="ve" if n > 1 else "s")
        median = percent(statistics.median(f.value for f in members))
        part = f"{n} tensor{'s' * (n > 1)} {verb} from step {members[0].step} (median {median}"
        if kind == "overflow" and block_formats.block_format(format_name).rule == FLOOR:
            part += f"; {format_name}{block_formats.RCEIL_SUFFIX} saturates none"
        parts.append(part + ")")
    if "underflow" not in by_kind:
        parts[0] = f"{lead}: {parts[0]}"
    kinds = Counter(g.kind for g in together)
    count = " and ".join(f"{kinds[k]} {k}" for k in _BLOCK_KINDS if k in kinds)
    tensors = {(f.tensor_type, f.name) for g in together for f in g.findings}
    first = min(together, key=lambda g: g.step)
    worst = min(together, key=lambda g: severity_rank(g.severity))
    return Fold(
        run=run.run,
        step=first.step,
        kind="underflow" if "underflow" in by_kind else first.kind,
        severity=worst.severity,
        format=format_name,
        tensors=len(tensors),
        message="; ".join(parts) + f"; {count} groups, one per tensor type",
        groups=tuple(together),
    )
