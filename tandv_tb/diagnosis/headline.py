"""A run's headline: one sentence on the first thing that went wrong, or "no problem
found".

The first thing is the earliest error; without one, the earliest warning that is not an
expected effect of a format. Gradients and optimizer state cast unscaled to float8 lose
their small values to zero (``underflow``) in every healthy training: that is why
scaling exists, and the run's grouped ``underflow`` row says it. A block-scaled format
(``tandv_tb.formats.blocks``) is recorded to tell what it would do to the tensors of a
training that runs in another dtype: what it loses (a block's small values to zero, the
values its scale rule saturates, blocks whose scale clamps) is told per run (``folding``),
and none of it is the training's first problem. Measured on the demo's model, FP4
elements (``mxfp4_e2m1``, ``nvfp4``) lose a median 5-20% of a tensor's non-zero values to
zero, and OCP's scale rule saturates about 1% of the values of every tensor in
``mxfp4_e2m1`` (``bench/RESULTS.md``): as headlines they would name every run. An overflowing
value, a drift or a dead tensor is not expected, and is the headline when nothing worse
came first. ``info`` findings never are, nor is a ``divergence``: it says where two runs
part, not which of them went wrong (it is listed under the first of the pair by name).
"""

from __future__ import annotations

import dataclasses

from tandv_tb.diagnosis.base import KINDS, Finding, scales_itself
from tandv_tb.diagnosis.run_numerics import RunNumerics
from tandv_tb.formats import Format

#: Warnings that an unscaled low-precision format causes in a healthy training.
EXPECTED_OF_UNSCALED = frozenset({"underflow"})
#: Findings about two runs, not about one.
BETWEEN_RUNS = frozenset({"divergence"})
NO_PROBLEM = "no problem found"


@dataclasses.dataclass(frozen=True)
class Headline:
    """The run's first problem (None: no problem found)."""

    run: str
    finding: Finding | None

    @property
    def message(self) -> str:
        return self.finding.message if self.finding else NO_PROBLEM


def expected_of_unscaled(kind: str, remedies: str = "") -> bool:
    """Whether findings of ``kind`` are an expected effect of an unscaled format, or (a
    ``scale`` remedying ``remedies``) the remedy of one."""
    return kind in EXPECTED_OF_UNSCALED or (kind == "scale" and remedies in EXPECTED_OF_UNSCALED)


def expected_of_format(kind: str, format: Format | str, remedies: str = "") -> bool:
    """Whether a finding (or group) of ``kind`` in ``format`` is an expected effect of
    that format: of an unscaled one (``expected_of_unscaled``), or anything of one that
    scales itself (a block-scaled one: what it loses is what it would do)."""
    return scales_itself(format) or expected_of_unscaled(kind, remedies)


def is_problem(finding: Finding) -> bool:
    """Whether the finding can be a headline."""
    if finding.kind in BETWEEN_RUNS:
        return False
    if finding.severity == "error":  # (a block format's findings are warnings at most)
        return True
    return finding.severity == "warning" and not expected_of_format(finding.kind, finding.format)


def headlines(found: list[Finding], numerics: dict[str, RunNumerics]) -> list[Headline]:
    """One headline per run of ``numerics``, in run order."""
    problems: dict[str, list[Finding]] = {}
    for f in found:
        if is_problem(f):
            problems.setdefault(f.run, []).append(f)
    listed = []
    for run in sorted(numerics):
        mine = problems.get(run, [])
        worst = [f for f in mine if f.severity == "error"] or mine
        rank = numerics[run].rank_of
        first = min(
            worst,
            key=lambda f: (f.step, KINDS.index(f.kind), rank(f.tensor_type, f.name)),
            default=None,
        )
        listed.append(Headline(run, first))
    return listed
