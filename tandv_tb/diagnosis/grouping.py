"""Grouped findings: where many tensors share one condition, one row says it with numbers.

A group is one run, kind and format (and, for ``overflow``, severity; for
``divergence``, the other run). It spans tensor types: its sentence names them ("every
Gradient, 29 of 30 Weight_Gradient") and its ``tensor_type`` is filled where it is one.
That keeps the condition a person acts on (scale float8_e4m3fn) on one line, where one
group per tensor type would tell it five times over.

A ``scale`` finding is the remedy of an ``underflow`` or ``overflow``: it joins the group
of the condition it remedies (the same run, format and tensor), whose sentence gives the
range of the scales and what they leave lost; a group lists every finding it stands for.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import Counter

from tandv_tb.diagnosis.base import (
    GROUP_COLUMNS,
    Finding,
    Thresholds,
    metric_label,
    percent,
)
from tandv_tb.diagnosis.run_numerics import RunNumerics
from tandv_tb.disk.metadata import execution_key

_SPIKES_LISTED = 5


@dataclasses.dataclass(frozen=True)
class Group:
    """One condition of a run and the findings that make it: the condition's findings in
    step, then execution order (the first is the one to show), then the ``scale``
    findings that remedy it.

    ``step`` is the condition's first step; ``value`` the median of its findings' values
    (one finding: its value); ``tensors`` how many tensors share it."""

    run: str
    step: int
    kind: str
    severity: str
    tensor_type: str
    name: str
    value: float
    message: str
    tensors: int
    findings: tuple[Finding, ...]

    def row(self) -> dict:
        """The grouped columns as a dict (JSON-ready except for a NaN ``value``)."""
        return {column: getattr(self, column) for column in GROUP_COLUMNS}


def group(
    found: list[Finding], numerics: dict[str, RunNumerics], thresholds: Thresholds
) -> list[Group]:
    """The findings of ``found`` (one row per tensor) as groups, in the order of their
    first finding."""
    conditions: dict[tuple, list[Finding]] = {}
    scales = []
    for f in found:
        if f.kind == "scale":
            scales.append(f)
        else:
            key = (f.run, f.kind, f.format, f.severity, f.other_run)
            conditions.setdefault(key, []).append(f)
    remedies: dict[tuple, list[Finding]] = {}
    for f in scales:
        key = _remedied(f, conditions)
        remedies.setdefault(key, []).append(f)
        conditions.setdefault(key, [])
    groups = []
    for key, members in conditions.items():
        run = numerics[key[0]]
        ordered = _in_order(members, run)
        extra = _in_order(remedies.get(key, []), run)
        groups.append(_group(ordered, extra, key[1], run, thresholds))
    return groups


def _remedied(scale: Finding, conditions: dict[tuple, list[Finding]]) -> tuple:
    """The key of the condition a ``scale`` finding remedies: its tensor's ``underflow``,
    else its format's ``overflow`` (the most severe), else a group of its own."""
    underflow = conditions.get((scale.run, "underflow", scale.format, "warning", ""), [])
    if any((f.tensor_type, f.name) == (scale.tensor_type, scale.name) for f in underflow):
        return (scale.run, "underflow", scale.format, "warning", "")
    for severity in ("error", "warning"):
        key = (scale.run, "overflow", scale.format, severity, "")
        if key in conditions:
            return key
    return (scale.run, "scale", scale.format, "info", "")


def _in_order(members: list[Finding], run: RunNumerics) -> list[Finding]:
    return sorted(members, key=lambda f: (f.step, run.rank_of(f.tensor_type, f.name)))


def _group(members, remedies, kind, run: RunNumerics, thresholds: Thresholds) -> Group:
    if not members:  # scale findings whose condition is not among the findings
        members, remedies, kind = remedies, [], "scale"
    first = members[0]
    tensors = {(f.tensor_type, f.name) for f in members}
    types = {f.tensor_type for f in members}
    if kind == "underflow":  # the numbers of the whole condition, even for one tensor
        message = _underflow(members, remedies, run, thresholds)
    elif len(members) == 1:
        message = first.message + _scale_clause(remedies, single=len(remedies) == 1)
    else:
        message = _summary(kind, members, run, thresholds)
    return Group(
        run=first.run,
        step=first.step,
        kind=kind,
        severity=first.severity,
        tensor_type=first.tensor_type if len(types) == 1 else "",
        name=first.name if len(tensors) == 1 else "",
        value=first.value if len(members) == 1 else statistics.median(f.value for f in members),
        message=message,
        tensors=first.tensors if len(members) == 1 else len(tensors),
        findings=(*members, *remedies),
    )


def _summary(kind, members, run: RunNumerics, thresholds: Thresholds) -> str:
    first = members[0]
    n, total = len({(f.tensor_type, f.name) for f in members}), len(run.tensors)
    where = _types(members, _type_totals(run, ""))
    if kind == "drift":
        return (
            f"{n} of {total} tensors jump in magnitude ({where}) from step {first.step}, the "
            f"first {metric_label(first.metric)} of {first.tensor_type} {first.name!r} by "
            f"{first.value:+.1f} binades"
        )
    if kind == "dead":
        return (
            f"{n} of {total} tensors are all zeros at {thresholds.dead_window} or more "
            f"consecutive recorded steps ({where}), the first {first.tensor_type} "
            f"{first.name!r} from step {first.step}"
        )
    if kind == "loss_spike":
        steps = ", ".join(str(f.step) for f in members[:_SPIKES_LISTED])
        more = f" and {len(members) - _SPIKES_LISTED} more" if len(members) > _SPIKES_LISTED else ""
        return f"the loss spikes at {len(members)} steps ({steps}{more}); first: {first.message}"
    if kind == "scale":
        return f"{first.format}: scales for {n} of {total} tensors" + _scale_clause(
            members, single=False
        )
    return f"{len(members)} {kind} findings from step {first.step}; first: {first.message}"


def _underflow(members, remedies, run: RunNumerics, thresholds: Thresholds) -> str:
    """E.g. "float8_e4m3fn: 139 of 160 tensors would lose over 5% of their non-zero values
    to zero from step 0 (every Gradient, 29 of 30 Weight_Gradient; median 100%); a
    per-tensor scale of 2^9 to 2^21 brings the median loss to 0.01% (0.8% at worst,
    estimated)"."""
    first = members[0]
    totals = _type_totals(run, first.format)
    n = len({(f.tensor_type, f.name) for f in members})
    their = "its" if n == 1 else "their"
    median = statistics.median(f.value for f in members)
    return (
        f"{first.format}: {n} of {sum(totals.values())} tensors would lose over "
        f"{percent(thresholds.underflow_share)} of {their} non-zero values to zero from step "
        f"{first.step} ({_types(members, totals)}; median {percent(median)})"
        + _scale_clause(remedies, single=n == 1)
    )


def _scale_clause(remedies: list[Finding], *, single: bool) -> str:
    """What the suggested power-of-two scales do (empty without any)."""
    if not remedies:
        return ""
    helped = [f for f in remedies if f.value != 0]
    parts = []
    if helped:
        low, high = int(min(f.value for f in helped)), int(max(f.value for f in helped))
        scale = f"2^{low}" if low == high else f"2^{low} to 2^{high}"
        lost = [f.still_lost for f in helped]
        if len(helped) == 1:
            parts.append(f"a scale of {scale} brings it to {percent(lost[0])} lost (estimated)")
        else:
            parts.append(
                f"a per-tensor scale of {scale} brings the median loss to "
                f"{percent(statistics.median(lost))} ({percent(max(lost))} at worst, estimated)"
            )
    stuck = len(remedies) - len(helped)
    if stuck:
        parts.append("no power-of-two scale helps" + ("" if single else f" {stuck} of them"))
    return "; " + "; ".join(parts)


def _type_totals(run: RunNumerics, format_name: str) -> dict[str, int]:
    """How many tensors of each type the run has (recording ``format_name``, if given)."""
    return Counter(
        info.tensor_type for info in run.tensors if not format_name or format_name in info.formats
    )


def _types(members: list[Finding], totals: dict[str, int]) -> str:
    """Which tensor types the members cover: "every Gradient and Weight_Gradient, 2 of 30
    Weight" (types in execution order)."""
    counts = Counter(t for t, _ in {(f.tensor_type, f.name) for f in members})
    ordered = sorted(counts, key=lambda t: execution_key(t, 0, ""))
    every = [t for t in ordered if counts[t] >= totals.get(t, 0)]
    some = [f"{counts[t]} of {totals[t]} {t}" for t in ordered if t not in every]
    listed = [f"every {_and(every)}"] if every else []
    return ", ".join(listed + some)


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
