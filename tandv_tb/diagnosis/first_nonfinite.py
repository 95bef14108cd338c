"""The ``nonfinite`` finding: a run's first NaN/Inf and the first tensor that held it."""

from __future__ import annotations

import numpy as np

from tandv_tb.diagnosis.base import Finding
from tandv_tb.diagnosis.run_numerics import RunNumerics
from tandv_tb.event_files.nonfinite_record import NonfiniteStep


def _counts(nan: int, posinf: int, neginf: int) -> str:
    parts = [(nan, "NaN"), (posinf, "+Inf"), (neginf, "-Inf")]
    return ", ".join(f"{count} {what}" for count, what in parts if count)


def _finding(
    run: str, step: int, tensor_type: str, name: str, counts, others: int, stopped: bool = False
) -> Finding:
    nan, posinf, neginf = (int(c) for c in counts)
    also = f"; {others} more tensor{'s' * (others != 1)} after it" if others else ""
    # The tracker stopped training there (on_nonfinite="raise"), before the update.
    stop = "; training was stopped there, before the optimizer applied the step" * stopped
    return Finding(
        run,
        step,
        "nonfinite",
        "error",
        tensor_type,
        name,
        float(nan + posinf + neginf),
        f"first NaN/Inf of the run at step {step}: {tensor_type} {name!r} "
        f"({_counts(nan, posinf, neginf)}), the first in execution order{also}{stop}",
        tensors=1 + others,
    )


def nonfinite_findings(watched: list[NonfiniteStep], numerics: RunNumerics) -> list[Finding]:
    """From the non-finite watch's records (it sees every step, tracked or not) where the run
    has any; else from the NaN/Inf counts of the recorded steps, the first tensor taken in
    execution order (``metadata.execution_key``)."""
    for found in watched:
        if found.entries:
            first = found.entries[0]
            counts = (first.nan, first.posinf, first.neginf)
            others = len(found.entries) - 1
            return [
                _finding(
                    numerics.run,
                    found.step,
                    first.tensor_type,
                    first.name,
                    counts,
                    others,
                    found.stopped,
                )
            ]
    c = numerics.columns
    bad = np.flatnonzero(c["nan_count"] + c["posinf_count"] + c["neginf_count"] > 0)
    if not len(bad):
        return []
    step = numerics.steps[bad].min()
    at_step = bad[numerics.steps[bad] == step]
    row = at_step[np.argmin(numerics.rank[numerics.tensor[at_step]])]
    info = numerics.tensors[numerics.tensor[row]]
    counts = (c["nan_count"][row], c["posinf_count"][row], c["neginf_count"][row])
    return [
        _finding(numerics.run, int(step), info.tensor_type, info.name, counts, len(at_step) - 1)
    ]
