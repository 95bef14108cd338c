"""CSV text of the JSON payloads of ``views`` (same data, one row per value)."""

from __future__ import annotations

from tandv_tb.plugin.block_routes import COUNT_COLUMNS
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


def blocks_csv(payload: dict) -> str:
    """One row per layer and step; per block format ``F`` the columns ``F:<count>`` (the
    route's counts and ``snr_db``), then ``F:scale:<k>``, the blocks whose scale is 2**k,
    for every k from the lowest to the highest held by any layer (empty where a layer did
    not record ``F``)."""
    held: dict[str, list[tuple[int, int]]] = {}  # format -> each layer's scale exponents
    for layer in payload["layers"]:
        for shown in layer["formats"]:
            width = shown["scales"].values.shape[1]
            ranges = held.setdefault(shown["format"], [])
            if width:
                ranges.append((shown["scale_lo"], shown["scale_lo"] + width))
    spans = {
        name: (min(lo for lo, _ in r), max(hi for _, hi in r)) if r else (0, 0)
        for name, r in held.items()
    }
    counts = (*COUNT_COLUMNS, "snr_db")
    header = ["run", "tensor_type", "layer", "step"]
    for name, (lo, hi) in spans.items():
        header += [f"{name}:{c}" for c in counts] + [f"{name}:scale:{k}" for k in range(lo, hi)]
    rows = []
    for layer in payload["layers"]:
        cells: dict[int, dict[str, object]] = {}
        for shown in layer["formats"]:
            name, scales = shown["format"], shown["scales"].values
            for i, step in enumerate(shown["steps"].values.tolist()):
                row = cells.setdefault(step, {})
                for c in counts:
                    row[f"{name}:{c}"] = shown[c].values[i].item()
                lo, hi = spans[name]
                for k in range(lo, hi):
                    j = k - shown["scale_lo"]
                    inside = 0 <= j < scales.shape[1]
                    row[f"{name}:scale:{k}"] = int(scales[i, j]) if inside else 0
        head = [payload["run"], payload["tensor_type"], layer["layer"]]
        rows += [[*head, step, *(cells[step].get(c) for c in header[4:])] for step in sorted(cells)]
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
