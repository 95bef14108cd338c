"""Grouped findings: where many tensors share one condition, one row says it with numbers.

A group is the findings of one run, kind, format and tensor type (the key of the
contract), of one severity (an ``overflow`` is an error or a warning). Two kinds are not
about a tensor type, and their key leaves it out:

- ``loss_spike``: (run, kind): every spike of the run's loss; a spike's ``tensor_type``
  and ``name`` are the tensor that drifted before it, not the condition's;
- ``divergence``: (run, kind, the other run): where two runs part, one finding per pair.

A ``scale`` of an element format is also keyed by the condition it remedies (its tensor's
``underflow`` in that format, else its ``overflow``): scaling up what underflows and
scaling down what overflows are two remedies. The group of an ``underflow`` or
``overflow`` says in its sentence what the scales of its tensors do, as the issue's
example does. A block-scaled format's ``scale`` (blocks whose scale clamps) is a
condition of its own, remedying nothing.

Formats are names, compared as such: a format added later groups like any other.
``tensors`` adds up what each finding stands for: one tensor each (a loss spike: the
run's loss), except a ``nonfinite``, which by definition is one finding per run naming
the first tensor, and counts every tensor holding NaN/Inf at its step.
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
    scales_itself,
    sort_key,
)
from tandv_tb.diagnosis.run_numerics import RunNumerics
from tandv_tb.event_files.metadata import execution_key

_SPIKES_LISTED = 5
_MOST_AFFECTED = 3  # tensors named by an overflow group
#: Kinds that are not about one tensor type (their key leaves it out).
NOT_BY_TENSOR_TYPE = frozenset({"loss_spike", "divergence"})


@dataclasses.dataclass(frozen=True)
class Group:
    """The findings of one condition of a run, in step, then execution order (the first is
    the one to show).

    ``step`` is the condition's first step; ``value`` the median of its findings' values
    (one finding: its value); ``tensors`` how many tensors share it; ``format`` the
    recorded format of an ``overflow``, ``underflow`` or ``scale``; ``remedies`` the kind
    of condition a ``scale`` group remedies."""

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
    format: str = ""
    remedies: str = ""

    def row(self) -> dict:
        """The grouped columns as a dict (JSON-ready except for a NaN ``value``)."""
        return {column: getattr(self, column) for column in GROUP_COLUMNS}


def group_key(finding: Finding, remedies: str = "") -> tuple:
    """(run, kind, format, tensor type, severity, other run, remedies): the contract's
    key, refined where a kind's findings hold two conditions (see the module)."""
    tensor_type = "" if finding.kind in NOT_BY_TENSOR_TYPE else finding.tensor_type
    return (
        finding.run,
        finding.kind,
        finding.format,
        tensor_type,
        finding.severity,
        finding.other_run,
        remedies,
    )


def group_order(item) -> tuple:
    """By run, then step, the most severe first; then kind, format and tensor type (in
    execution order): a ``Group`` or anything with those attributes."""
    return (*sort_key(item), item.format, execution_key(item.tensor_type, 0, ""))


def group(
    found: list[Finding], numerics: dict[str, RunNumerics], thresholds: Thresholds
) -> list[Group]:
    """The findings of ``found`` (one row per tensor) as groups, in ``group_order``."""
    scaled = [f for f in found if not scales_itself(f.format)]
    conditions = {  # what each tensor's scale remedies: its underflow, else its overflow
        _cast_of(f): f.kind
        for f in sorted(scaled, key=lambda f: f.kind == "underflow")  # written last: it wins
        if f.kind in ("underflow", "overflow")
    }
    scales = {_cast_of(f): f for f in scaled if f.kind == "scale"}
    members: dict[tuple, list[Finding]] = {}
    for f in found:
        remedies = conditions.get(_cast_of(f), "") if f.kind == "scale" else ""
        members.setdefault(group_key(f, remedies), []).append(f)
    groups = []
    for key, listed in members.items():
        run = numerics[key[0]]
        ordered = sorted(listed, key=lambda f: (f.step, run.rank_of(f.tensor_type, f.name)))
        remedy = [
            scales[_cast_of(f)]
            for f in ordered
            if f.kind in ("underflow", "overflow") and _cast_of(f) in scales
        ]
        groups.append(_group(ordered, remedy, key[-1], run, thresholds))
    return sorted(groups, key=group_order)


def _cast_of(finding: Finding) -> tuple:
    """The run, format and tensor of a finding: a tensor cast to a format."""
    return (finding.run, finding.format, finding.tensor_type, finding.name)


def _group(members, remedy, remedies: str, run: RunNumerics, thresholds: Thresholds) -> Group:
    first = members[0]
    kind = first.kind
    tensors = {(f.tensor_type, f.name) for f in members}
    types = {f.tensor_type for f in members}
    if kind == "underflow":  # the numbers of the whole condition, even for one tensor
        message = underflow_sentence(members, remedy, run, thresholds)
    elif len(members) == 1:
        message = first.message + _scale_clause(remedy, single=True)
    else:
        message = _summary(members, remedy, remedies, run, thresholds)
    return Group(
        run=first.run,
        step=first.step,
        kind=kind,
        severity=first.severity,
        tensor_type=first.tensor_type if len(types) == 1 else "",
        name=first.name if len(tensors) == 1 else "",
        value=first.value if len(members) == 1 else statistics.median(f.value for f in members),
        message=message,
        tensors=sum(f.tensors for f in members),
        findings=tuple(members),
        format=first.format,
        remedies=remedies,
    )


def _summary(members, remedy, remedies, run: RunNumerics, thresholds: Thresholds) -> str:
    first = members[0]
    kind, n = first.kind, len(members)
    if kind == "loss_spike":
        steps = ", ".join(str(f.step) for f in members[:_SPIKES_LISTED])
        more = f" and {n - _SPIKES_LISTED} more" if n > _SPIKES_LISTED else ""
        return f"the loss spikes at {n} steps ({steps}{more}); first: {first.message}"
    if kind in NOT_BY_TENSOR_TYPE:
        return f"{n} {kind} findings from step {first.step}; first: {first.message}"
    of = f"{n} of {_type_totals(run, first.format)[first.tensor_type]} {first.tensor_type} tensors"
    median = percent(statistics.median(f.value for f in members))
    if scales_itself(first.format) and kind in ("overflow", "scale"):
        top = sorted(members, key=lambda f: -f.value)
        named = ", ".join(f"{f.name!r} {percent(f.value)}" for f in top[:_MOST_AFFECTED])
        more = f" and {n - _MOST_AFFECTED} more" if n > _MOST_AFFECTED else ""
        what = (
            "round some of their finite values down to their block's largest element value"
            if kind == "overflow"
            else f"have over {percent(thresholds.underflow_share)} of their non-zero blocks "
            "with a scale clamped to the scale's range"
        )
        verb = "saturates" if kind == "overflow" else "clamps block scales"
        return (
            f"{first.format} {verb} from step {first.step}: {of} {what} (median {median}), "
            f"most affected {named}{more}"
        )
    if kind == "overflow":
        limit = (
            thresholds.overflow_error if first.severity == "error" else thresholds.overflow_warning
        )
        how = f"more than {percent(limit)}" if limit else "some"
        top = sorted(members, key=lambda f: -f.value)
        named = ", ".join(f"{f.name!r} {percent(f.value)}" for f in top[:_MOST_AFFECTED])
        more = f" and {n - _MOST_AFFECTED} more" if n > _MOST_AFFECTED else ""
        median = percent(statistics.median(f.value for f in members))
        return (
            f"{first.format} overflows from step {first.step}: {of} lose {how} of their "
            f"finite values to overflow (median {median}), most affected {named}{more}"
            + _scale_clause(remedy, single=False)
        )
    if kind == "drift":
        return (
            f"{of} jump in magnitude from step {first.step}, the first "
            f"{metric_label(first.metric)} of {first.name!r} by {first.value:+.1f} binades"
        )
    if kind == "dead":
        return (
            f"{of} are all zeros at {thresholds.dead_window} or more consecutive recorded "
            f"steps, the first {first.name!r} from step {first.step}"
        )
    if kind == "scale":
        that = f" that {remedies}" if remedies else ""
        return f"{first.format}: scales for the {n} {first.tensor_type} tensors{that}" + (
            _scale_clause(members, single=False)
        )
    return f"{of}: {kind} from step {first.step}; first: {first.message}"


def underflow_sentence(
    members: list[Finding],
    remedy: list[Finding],
    run: RunNumerics,
    thresholds: Thresholds,
    *,
    lead: str = "",
) -> str:
    """What ``members`` (``underflow`` findings of one run and format) say together, with
    what the ``scale`` findings of their tensors (``remedy``) do. One tensor type: "float8_e4m3fn:
    38 of 38 Gradient tensors would lose over 5% of their non-zero values to zero from
    step 0 (median 100%); a per-tensor scale of 2^9 to 2^21 brings the median loss to 0.01%
    (0.8% at worst, estimated)"; several: "... 139 of 160 tensors ... (every Gradient, 29 of
    30 Weight_Gradient; median 100%) ...". ``lead`` replaces the format before the colon."""
    first = members[0]
    totals = _type_totals(run, first.format)
    n = len({(f.tensor_type, f.name) for f in members})
    types = {f.tensor_type for f in members}
    median = f"median {percent(statistics.median(f.value for f in members))}"
    if len(types) == 1:
        who, detail = f"{n} of {totals[first.tensor_type]} {first.tensor_type} tensors", median
    else:
        who, detail = (
            f"{n} of {sum(totals.values())} tensors",
            f"{_types(members, totals)}; {median}",
        )
    their = "its" if n == 1 else "their"
    return (
        f"{lead or first.format}: {who} would lose over {percent(thresholds.underflow_share)} of "
        f"{their} non-zero values to zero from step {first.step} ({detail})"
        + _scale_clause(remedy, single=n == 1)
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
        info.tensor_type for info in run.tensors if not format_name or format_name in info.recorded
    )


def _types(members: list[Finding], totals: dict[str, int]) -> str:
    """Which tensor types the members cover: "every Gradient and Weight_Gradient, 2 of 30
    Weight" (types in execution order)."""
    counts = Counter(t for t, _ in {(f.tensor_type, f.name) for f in members})
    ordered = sorted(counts, key=lambda t: execution_key(t, 0, ""))
    every = [t for t in ordered if counts[t] >= totals.get(t, 0)]
    some = [f"{counts[t]} of {totals[t]} {t}" for t in ordered if t not in every]
    listed = [f"every {and_join(every)}"] if every else []
    return ", ".join(listed + some)


def and_join(words: list[str]) -> str:
    """ "a", "a and b", "a, b and c"."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
