"""Every route of ``tandv_tb/plugin/http_api.md`` over what a ``tensorboard`` serves: to
check a server answers every one of them, every step."""

from __future__ import annotations

import urllib.parse

from tests.helpers.plugin import TensorBoardProcess
from tests.helpers.store_runs import ROUTES


def query(route: str, **params) -> str:
    """The path of a plugin route with its parameters (a list repeats its key)."""
    return ROUTES + route + "?" + urllib.parse.urlencode(params, doseq=True)


def every_route(server: TensorBoardProcess) -> list[str]:
    """Every route of ``http_api.md`` over every run, tensor type and step: the listings,
    each layer's histogram at each of its steps, heatmaps and series of every step (all
    columns), scalars, findings, and the CSV routes."""
    paths = [query("runs"), query("formats"), query("metrics")]
    listed = server.json(query("runs"))["runs"]
    runs = [run["run"] for run in listed]
    paths.append(query("findings", run=runs))
    for run in listed:
        paths += [query("scalars", run=run["run"]), query("scalars.csv", run=run["run"])]
        paths.append(query("graph", run=run["run"]))
        for tensor_type in run["tensor_types"]:
            where = {"run": run["run"], "tensor_type": tensor_type}
            layers = server.json(query("layers", **where))["layers"]
            paths += [query("layers", **where), query("layers.csv", **where)]
            paths.append(query("steps", **where))
            names = [layer["layer"] for layer in layers]
            for metric, extra in (
                ("log2_rm2", {}),
                ("overflow_fraction", {"format": "float8_e4m3fn"}),
            ):
                heatmap = {**where, "metric": metric, "columns": 10000, **extra}
                paths += [query("heatmap", **heatmap), query("heatmap.csv", **heatmap)]
            series = {**where, "layer": names, "metric": ["mean", "log2_max_abs"]}
            paths += [query("series", **series), query("series.csv", **series)]
            for layer in names:
                steps = server.json(query("steps", **where, layer=layer))["steps"]
                paths += [query("histogram", **where, layer=layer, step=s) for s in steps]
                paths.append(query("histogram.csv", **where, layer=layer))
    return paths
