"""The ``graph`` route: a run's model graph (``tandv_tb.event_files.graph_record``), for the tab's
Graph view.

Read from the plugin's store, which keeps each graph record of the run's event files as it
reads them (its graph as JSON, checked when read, or why it could not be read): the run's
graph is its last readable record. Records that could not be read (damaged, foreign, of a
newer tandv_tb) are listed in ``skipped`` with the reason, never a server error; a run
without a graph answers empty lists, which the view shows as the module tree of its layer
names.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from tandv_tb.plugin.listing import RunIndex
from tandv_tb.plugin.responses import Encoded

if TYPE_CHECKING:
    from tandv_tb.plugin.numerics_routes import Query


def graph(query: Query, index: RunIndex) -> dict:
    """``{"run", "step", "nodes", "edges", "skipped"}`` of the run (see http_api.md)."""
    latest, problems = query.numerics().graph(index.run)
    step, nodes, edges = None, [], []
    if latest is not None:
        step, text = latest
        stored = json.loads(text)  # written by the store from a checked ModelGraph
        nodes, edges = stored["nodes"], stored["edges"]
    return {
        "run": index.run,
        "step": step,
        "nodes": Encoded(nodes),
        "edges": Encoded(edges),
        "skipped": [{"step": s, "reason": reason} for s, reason in problems],
    }
