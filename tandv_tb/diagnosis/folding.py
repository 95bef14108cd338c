"""The default view of the grouped findings: what the command line prints and the Findings
card shows first, with the expected effects of the recorded formats folded into at most two
lines per run: one for its element formats, one for its block-scaled formats.

Folded are exactly the groups that the headline rule skips as expected of a format
(``headline.expected_of_format``): the ``underflow`` groups of an element format and the
``scale`` groups that remedy them, and every group of a block-scaled format (its
underflow, the values its scale rule saturates, its blocks whose scale clamps: what the
format would do). Grouped by tensor type, as the contract asks, they are most of a
logdir's groups (a float8 run has one per tensor type and format, twice); folded, a run's
element formats take one line and its block formats another, which say them format by
format with the numbers of all their tensors. Per run rather than per format: each format
asked for in ``formats=`` would otherwise add a line to every run (the demo records four),
and what these lines say is expected, never the story. A run whose folded groups are a
single group shows that group itself. Nothing is dropped: ``tandv_tb.findings`` and
``--json`` list every group, ``--groups`` prints them, and the card keeps them behind the
fold's disclosure.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import Counter

from tandv_tb.diagnosis.base import Thresholds, percent, scales_itself, severity_rank
from tandv_tb.diagnosis.grouping import Group, and_join, group_order, underflow_sentence
from tandv_tb.diagnosis.headline import expected_of_format
from tandv_tb.diagnosis.run_numerics import RunNumerics
from tandv_tb.formats import BlockFormat, Format


@dataclasses.dataclass(frozen=True)
class Fold:
    """The folded groups of one run and kind of format (element or block-scaled) as one row
    of the default view, with the attributes of a ``Group`` that a row shows (``kind``: the
    condition's, ``underflow``; ``tensors``: how many tensors it holds; ``format``: its
    format, or its formats separated by ", "; ``tensor_type`` empty: it spans several)."""

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
    """The rows of the default view, in ``group_order``: every group not folded, and per
    run one ``Fold`` of the folded groups of its element formats and one of its block
    formats (a lone group stays itself)."""
    shown: list[Group | Fold] = []
    by_family: dict[tuple[str, bool], dict[Format, list[Group]]] = {}
    for g in groups:
        if folded(g):
            family = (g.run, scales_itself(g.format))
            by_family.setdefault(family, {}).setdefault(g.format, []).append(g)
        else:
            shown.append(g)
    for (run, block), by_format in by_family.items():
        if not block:  # scales whose format has no condition to remedy stay groups
            for format_name in [f for f, gs in by_format.items() if _conditions(gs) == []]:
                shown.extend(by_format.pop(format_name))
        together = [g for gs in by_format.values() for g in gs]
        if len(together) <= 1:
            shown.extend(together)
        elif block:
            shown.append(_block_fold(by_format, numerics[run], thresholds))
        else:
            shown.append(_fold(by_format, numerics[run], thresholds))
    return sorted(shown, key=group_order)


def _conditions(groups: list[Group]) -> list[Group]:
    return [g for g in groups if g.kind != "scale"]


def _fold(by_format: dict[Format, list[Group]], run: RunNumerics, thresholds: Thresholds) -> Fold:
    """The ``Fold`` of a run's element formats: per format, its ``underflow`` groups (the
    one kind expected of an unscaled format) told with the ``scale`` groups remedying
    them."""
    names = list(by_format)
    lead = f"{and_join(names)} without a scale (expected)"
    sentences = []
    for name, together in by_format.items():
        members = [f for g in _conditions(together) for f in g.findings]
        members.sort(key=lambda f: (f.step, run.rank_of(f.tensor_type, f.name)))
        remedy = [f for g in together if g.kind == "scale" for f in g.findings]
        sentences.append(
            underflow_sentence(
                members, remedy, run, thresholds, lead=lead if len(names) == 1 else name
            )
        )
    message = sentences[0] if len(names) == 1 else f"{lead}: " + "; ".join(sentences)
    return _folded(by_format, run, message, ("underflow", "scale"))


#: A block format's kinds of findings, in the order its fold tells them.
_BLOCK_KINDS = ("underflow", "overflow", "scale")


def _block_fold(
    by_format: dict[Format, list[Group]], run: RunNumerics, thresholds: Thresholds
) -> Fold:
    """The ``Fold`` of a run's block-scaled formats: per format, its underflow, the values
    its scale rule saturates and its blocks whose scale clamps, each with the numbers of
    all its tensors."""
    names = list(by_format)
    several = len(names) > 1
    lead = f"{and_join(names)}, block-scaled (what {'they' if several else 'it'} would lose)"
    parts = []
    for name, together in by_format.items():
        parts += _block_parts(name, together, run, thresholds, lead=name if several else lead)
    message = f"{lead}: " + "; ".join(parts) if several else "; ".join(parts)
    return _folded(by_format, run, message, _BLOCK_KINDS)


def _block_parts(
    format: BlockFormat, together: list[Group], run: RunNumerics, thresholds: Thresholds, lead: str
) -> list[str]:
    """What one block format's groups say, in ``_BLOCK_KINDS`` order, ``lead`` first."""
    by_kind: dict[str, list] = {}
    for g in together:
        by_kind.setdefault(g.kind, []).extend(g.findings)
    for members in by_kind.values():
        members.sort(key=lambda f: (f.step, run.rank_of(f.tensor_type, f.name)))
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
        if kind == "overflow" and format.round_up:
            part += f"; {format.round_up} saturates none"
        parts.append(part + ")")
    if "underflow" not in by_kind:
        parts[0] = f"{lead}: {parts[0]}"
    return parts


def _folded(
    by_format: dict[Format, list[Group]], run: RunNumerics, message: str, kinds: tuple[str, ...]
) -> Fold:
    """The ``Fold`` of ``by_format``'s groups saying ``message``, with how many groups of
    each of ``kinds`` it holds."""
    together = [g for gs in by_format.values() for g in gs]
    counts = Counter(g.kind for g in together)
    count = " and ".join(f"{counts[k]} {k}" for k in kinds if k in counts)
    # what the fold is about: an element format's underflow (its scales remedy it), every
    # kind of a block format (its clamped scales are a condition of their own)
    about = [g for g in together if g.kind != "scale" or scales_itself(g.format)]
    tensors = {(f.tensor_type, f.name) for g in about for f in g.findings}
    first = min(about, key=lambda g: g.step)
    kind = "underflow" if any(g.kind == "underflow" for g in about) else first.kind
    worst = min(together, key=lambda g: severity_rank(g.severity))
    return Fold(
        run=run.run,
        step=first.step,
        kind=kind,
        severity=worst.severity,
        format=", ".join(by_format),
        tensors=len(tensors),
        message=f"{message}; {count} groups, one per tensor type",
        groups=tuple(together),
    )
