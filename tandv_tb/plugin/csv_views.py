"""CSV text of the JSON payloads of ``views`` (same data, one row per value)."""

from __future__ import annotations

from tandv_tb.plugin.responses import csv_text


def layers_csv(payload: dict) -> str:
    header = ["run", "tensor_type", "layer", "module_type", "order", "dtype", "steps"]
    header += ["first_step", "last_step"]
    rows = (
        [payload["run"], payload["tensor_type"], *(layer[k] for k in header[2:])]
        for layer in payload["layers"]
    )
    return csv_text(header, rows)


def histogram_csv(payload: dict) -> str:
    header = ["run", "tensor_type", "layer", "step", "dtype", "bin", "count"]
    rows = []
    for layer in payload["layers"]:
        head = [payload["run"], payload["tensor_type"], layer["layer"], layer["step"]]
        head.append(layer["dtype"])
        counts = layer["counts"].values.tolist()
        rows += [[*head, layer["bins_lo"] + i, c] for i, c in enumerate(counts)]
        for label, key in (("zero", "zero_count"), ("nan", "nan_count")):
            rows.append([*head, label, layer[key]])
        rows.append([*head, "+inf", layer["posinf_count"]])
        rows.append([*head, "-inf", layer["neginf_count"]])
    return csv_text(header, rows)


def heatmap_csv(payload: dict) -> str:
    header = ["layer", *(str(c["first_step"]) for c in payload["columns"])]
    numbers = payload["values"]
    values, present = numbers.values.tolist(), numbers.present.tolist()
    rows = (
        [layer["layer"], *(v if p else None for v, p in zip(row, shown))]
        for layer, row, shown in zip(payload["layers"], values, present)
    )
    return csv_text(header, rows)


def series_csv(payload: dict) -> str:
    header = ["run", "tensor_type", "layer", "metric", "format", "step", "value"]
    rows = (
        [payload["run"], payload["tensor_type"], s["layer"], s["metric"], payload["format"], st, v]
        for s in payload["series"]
        for st, v in zip(s["steps"].values.tolist(), s["values"].values.tolist())
    )
    return csv_text(header, rows)


def scalars_csv(payload: dict) -> str:
    header = ["run", "tag", "step", "wall_time", "value"]
    rows = (
        [payload["run"], s["tag"], step, wall, value]
        for s in payload["scalars"]
        for step, wall, value in zip(
            s["steps"].values.tolist(), s["wall_times"].values.tolist(), s["values"].values.tolist()
        )
    )
    return csv_text(header, rows)
