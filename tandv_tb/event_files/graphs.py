"""Reading the model's graph back from a logdir (``read_graph``).

The record itself (its tag, encoding and checks) is ``tandv_tb.event_files.graph_record``; this
module reads it with the event reader, which decodes it while it reads a file.
"""

from __future__ import annotations

import os
import warnings

from tandv_tb.event_files.event_reader import DataWarning, read_file, select_runs
from tandv_tb.event_files.graph_record import ModelGraph
from tandv_tb.event_files.tag_table import TagTable

__all__ = ["read_graph"]


def read_graph(logdir: str | os.PathLike, run: str | None = None) -> dict[str, ModelGraph]:
    """The graph of every run under ``logdir`` (or of its one ``run``) that recorded one,
    by run: its last readable record (the last step's; of one step, the last written in
    the run's files, sorted by name).

    A record that cannot be read is skipped with a ``DataWarning``, as by ``read_frame``.
    ``FileNotFoundError`` for a missing logdir, ``ValueError`` for an unknown run.
    """
    found: dict[str, ModelGraph] = {}
    for name, sources in sorted(select_runs(logdir, run).items()):
        table, latest = TagTable(), None
        for source in sources:
            for chunk in read_file(source, table):
                for problem in chunk.problems:
                    warnings.warn(problem, DataWarning, stacklevel=2)
                for record in chunk.graphs:
                    if record.graph is not None and (latest is None or record.step >= latest.step):
                        latest = record
        if latest is not None:
            found[name] = latest.graph
    return found
