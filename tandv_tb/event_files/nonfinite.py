"""Reading the non-finite watch's records back from a logdir (``read_nonfinite``).

The record itself (its tag, encoding and entries) is ``tandv_tb.event_files.nonfinite_record``;
this module reads it with the event reader, which decodes it while it reads a file.
"""

from __future__ import annotations

import os
import warnings

from tandv_tb.event_files.event_reader import DataWarning, read_file, select_runs
from tandv_tb.event_files.nonfinite_record import NonfiniteEntry, NonfiniteStep
from tandv_tb.event_files.tag_table import TagTable

__all__ = ["NonfiniteEntry", "NonfiniteStep", "read_nonfinite"]


def read_nonfinite(logdir: str | os.PathLike, run: str | None = None) -> list[NonfiniteStep]:
    """Every step where the watch found NaN/Inf under ``logdir`` (or in one ``run``), sorted
    by run, then step (a step written twice, as by a resumed run, appears twice), each
    step's ``NonfiniteEntry``s in execution order.

    What cannot be read (a malformed record, damaged bytes) is skipped with a
    ``DataWarning``, as by ``read_frame``. ``FileNotFoundError`` for a missing logdir,
    ``ValueError`` for an unknown run.
    """
    runs = select_runs(logdir, run)
    found: list[NonfiniteStep] = []
    for name in sorted(runs):
        table, steps = TagTable(), []
        for source in runs[name]:
            for chunk in read_file(source, table):
                for problem in chunk.problems:
                    warnings.warn(problem, DataWarning, stacklevel=2)
                steps += [
                    NonfiniteStep(name, step, tuple(entries), stopped)
                    for step, entries, stopped in chunk.nonfinite
                ]
        found += sorted(steps, key=lambda s: s.step)
    return found
