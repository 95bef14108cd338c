"""The ``findings`` route: what went wrong in the ticked runs, for the tab's Findings card.

Computed by the findings engine (``tandv_tb.diagnosis``) over every recorded step, from the
plugin's own store, with the default thresholds; ``divergence`` for every pair of the runs.
"""

from __future__ import annotations

import dataclasses
import math

from tensorboard.errors import InvalidArgumentError

from tandv_tb.diagnosis.base import Thresholds, severity_rank
from tandv_tb.diagnosis.engine import diagnose

#: At most this many runs a request (their pairs are compared).
MAX_RUNS = 64
DEFAULTS = Thresholds()


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


def findings(query, runs: list[str]) -> dict:
    found = diagnose(query.numerics(), runs, DEFAULTS)
    found.sort(key=lambda f: (severity_rank(f.severity), f.run, f.step))
    listed = []
    for f in found:
        row = {**f.row(), "other_run": f.other_run or None}
        row["value"] = None if math.isnan(row["value"]) else row["value"]
        listed.append(row)
    return {"runs": runs, "findings": listed, "thresholds": dataclasses.asdict(DEFAULTS)}
