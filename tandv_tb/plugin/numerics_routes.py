"""The JSON payloads of the data routes (see ``http_api.md``), built from a ``RunIndex``."""

from __future__ import annotations

import dataclasses

import numpy as np
from tensorboard.errors import InvalidArgumentError, NotFoundError

from tandv_tb import formats as fmt
from tandv_tb.event_files import metadata
from tandv_tb.event_files.record import COUNTS
from tandv_tb.plugin import block_routes, difference, metrics, snr
from tandv_tb.plugin.casts import cast_counts
from tandv_tb.plugin.downsample import (
    REDUCTIONS,
    Columns,
    reduce_matrix,
    reduce_rows,
    union_steps,
    window,
)
from tandv_tb.plugin.listing import Listing, RunIndex, TagEntry
from tandv_tb.plugin.params import MAX_STEP, Params
from tandv_tb.plugin.responses import Encoded, Matrix, Numbers
from tandv_tb.plugin.scalars import Scalars
from tandv_tb.store import NumericsStore
from tandv_tb.store.series import LayerSeries, Needs

MAX_COLUMNS = 10_000
MAX_POINTS = 100_000


@dataclasses.dataclass
class Query:
    """One request: what it reads (the listing of runs and tags, the store, TensorBoard's
    scalars), TensorBoard's request context and the parameters."""

    listing: Listing
    store: NumericsStore | None  # None without a logdir (no data provider)
    scalars: Scalars
    ctx: object
    experiment_id: str
    params: Params

    def runs(self) -> dict[str, RunIndex]:
        return self.listing.runs(self.ctx, self.experiment_id)

    def run(self, name: str) -> RunIndex:
        """The numerics tags of one run; 404 for a run without numerics."""
        return self.listing.run(self.ctx, self.experiment_id, name)

    def numerics(self) -> NumericsStore:
        """The store of every recorded step; 404 without a logdir."""
        if self.store is None:
            raise NotFoundError(
                "the Numerics tab reads the event files of --logdir or --logdir_spec; start "
                "tensorboard with one"
            )
        return self.store

    def series(self, index: RunIndex, entries: list[TagEntry], needs: Needs) -> list[LayerSeries]:
        return self.numerics().series(index.run, [e.tag for e in entries], needs)


# -- shared parameter handling -----------------------------------------------------------
def format_json(name: str) -> dict:
    info = fmt.info(name)
    return {
        "format": info.name,
        "bits": info.bits,
        "min_exponent": info.min_exponent,
        "max_exponent": info.max_exponent,
        "smallest_subnormal": info.smallest_subnormal,
        "smallest_normal": info.smallest_normal,
        "max": info.max,
        "has_inf": info.has_inf,
        "has_nan": info.has_nan,
    }


def canonical_format(name: str) -> fmt.Format:
    """The format named ``name`` (an ml_dtypes name, or a block-scaled format's); 400 for
    anything else."""
    try:
        return fmt.as_format(name)
    except (ValueError, TypeError) as error:
        raise InvalidArgumentError(str(error)) from None


def _formats(params: Params) -> list[fmt.Format]:
    return list(dict.fromkeys(canonical_format(f) for f in params.texts("format")))


def _format(params: Params) -> fmt.Format | None:
    name = params.text("format", required=False)
    return None if name is None else canonical_format(name)


def _selected_layers(index: RunIndex, tensor_type: str, params: Params) -> list[TagEntry]:
    """The layers named by ``layer`` (in model order) or matching ``layer_regex``."""
    layers = index.layers(tensor_type)
    names = params.texts("layer")
    pattern = params.regex("layer_regex")
    if names:
        wanted = {index.layer(tensor_type, name).tag for name in names}
        layers = [e for e in layers if e.tag in wanted]
    if pattern is not None:
        layers = [e for e in layers if pattern.search(e.info.name)]
    return layers


def _layer_json(entry: TagEntry, dtype: str | None) -> dict:
    """A layer as the routes list it; ``dtype``: its dtype at its last held step."""
    return {
        "layer": entry.info.name,
        "module_type": entry.info.module_type,
        "order": entry.info.order,
        "dtype": dtype,
    }


# -- metadata routes ---------------------------------------------------------------------
def runs(query: Query) -> dict:
    indexes = query.runs()
    listed, skipped = [], []
    for run, index in indexes.items():
        skipped += [{"run": run, "tag": tag, "reason": why} for tag, why in index.skipped]
        entries = list(index.entries.values())
        if not entries:
            continue
        recorded = sorted({f for e in entries for f in e.info.formats})
        blocks = sorted({f for e in entries for f in e.info.block_formats})
        listed.append(
            {
                "run": run,
                "tensor_types": index.tensor_types(),
                "formats": recorded,
                "block_formats": blocks,
                "layer_count": len({e.info.name for e in entries}),
                "max_step": max(e.max_step for e in entries),
            }
        )
    scalar_runs = query.scalars.runs(query.ctx, query.experiment_id)
    notice = query.store.notice if query.store is not None else None
    return {
        "runs": listed,
        "scalar_runs": scalar_runs,
        "skipped": skipped,
        "notices": [notice] if notice else [],
        "tensor_types": sorted(
            {t for run in listed for t in run["tensor_types"]}, key=metadata.tensor_type_key
        ),
    }


def formats_listing(query: Query) -> dict:
    return {
        "formats": [format_json(name) for name in metadata.DTYPE_CODES],
        "block_formats": block_routes.listing(),
        "default_overlays": list(fmt.DEFAULT_OVERLAYS),
    }


def metrics_listing(query: Query) -> dict:
    return {"metrics": [m.as_json() for m in metrics.METRICS.values()]}


def layers(query: Query, index: RunIndex) -> dict:
    tensor_type = query.params.text("tensor_type")
    entries = index.layers(tensor_type)
    listed, skipped = [], []
    for entry, series in zip(entries, query.series(index, entries, Needs(("dtype_code",)))):
        row = _layer_json(entry, series.last_dtype())
        row["formats"] = list(entry.info.formats)
        row["block_formats"] = list(entry.info.block_formats)
        row["steps"] = len(series)
        row["first_step"] = int(series.steps[0]) if len(series) else None
        row["last_step"] = int(series.steps[-1]) if len(series) else None
        listed.append(row)
        if series.skipped_steps:
            skipped.append(_skipped_steps(entry, series))
    return {"run": index.run, "tensor_type": tensor_type, "layers": listed, "skipped": skipped}


def _skipped_steps(entry: TagEntry, series: LayerSeries) -> dict:
    held = len(series) + series.skipped_steps
    return {
        "layer": entry.info.name,
        "tag": entry.tag,
        "steps": series.skipped_steps,
        "reason": f"{series.skipped_steps} of {held} stored steps are not numerics records "
        "this tandv_tb can read (wrong shape, dtype or length, or inconsistent counts)",
    }


def steps(query: Query, index: RunIndex) -> dict:
    tensor_type = query.params.text("tensor_type")
    layer = query.params.text("layer", required=False)
    entries = [index.layer(tensor_type, layer)] if layer else index.layers(tensor_type)
    found = union_steps([s.steps for s in query.series(index, entries, Needs())], None, None)
    return {"run": index.run, "tensor_type": tensor_type, "layer": layer, "steps": Numbers(found)}


# -- data routes -------------------------------------------------------------------------
def histogram(query: Query, index: RunIndex) -> dict:
    params = query.params
    tensor_type = params.text("tensor_type")
    entries = [index.layer(tensor_type, name) for name in params.texts("layer", required=True)]
    step = params.integer("step", low=0, high=MAX_STEP)
    asked_elements, asked_blocks = block_routes.split_asked(_formats(params))
    listed = []
    for entry in entries:
        blocks = block_routes.layer_block_formats(entry, asked_blocks or None, index.run)
        found = query.numerics().record(index.run, entry.tag, step)
        if found is None:
            raise NotFoundError(f"layer {entry.info.name!r} has no readable steps")
        held_step, record = found
        one = LayerSeries.of_record(entry.info, held_step, record)
        shown = asked_elements or list(
            dict.fromkeys(
                map(fmt.as_format, [record.dtype, *entry.info.formats, *fmt.DEFAULT_OVERLAYS])
            )
        )
        dtype_info = fmt.info(record.dtype)
        item = {
            **_layer_json(entry, one.dtype(0)),
            "step": held_step,
            "dtype_min_exponent": dtype_info.min_exponent,
            "dtype_max_exponent": dtype_info.max_exponent,
            **{name: getattr(record, name) for name in COUNTS},
            "bins_lo": record.bins_lo,
            "counts": Numbers(np.asarray(record.counts, dtype=np.int64)),
            "statistics": record.statistics,
            "formats": [_format_counts(one, name) for name in shown],
            "blocks": [block_routes.block_counts_json(b, record.blocks[b]) for b in blocks],
        }
        listed.append(item)
    return {
        "run": index.run,
        "tensor_type": tensor_type,
        "requested_step": step,
        "layers": listed,
    }


def _format_counts(one: LayerSeries, name: fmt.ElementFormat) -> dict:
    casts = cast_counts(one, name)
    return {
        "format": name,
        "exact": casts.exact,
        "underflow": int(casts.underflow[0]),
        "overflow": int(casts.overflow[0]),
        **{k: v for k, v in format_json(name).items() if k != "format"},
    }


def heatmap(query: Query, index: RunIndex) -> dict:
    params = query.params
    tensor_type = params.text("tensor_type")
    format_name = _format(params)
    chosen = metrics.metric(params.text("metric"), format_name)
    if not chosen.needs_format:
        format_name = None
    n_columns = params.integer("columns", 1000, low=1, high=MAX_COLUMNS)
    how = params.choice("reduce", REDUCTIONS, "max")
    low, high = params.step_window()
    entries = _selected_layers(index, tensor_type, params)
    other = difference.minus_index(query, index, tensor_type)
    _check_block_format(format_name, tensor_type, index, entries, other)
    needs = metrics.needs(chosen, format_name)
    pooled = chosen.metric == "snr_db" and other is None  # a cell's records together
    tags = [e.tag for e in entries]
    grid = query.numerics().grid(index.run, tags, needs) if other is None else None
    if grid is not None:  # every layer at the same steps: one matrix
        shown = window(grid.steps, low, high)
        columns = Columns.split(grid.steps[shown], n_columns)
        if pooled:
            sums = snr.block_sums(grid, format_name)
            rows = [(grid.steps, *(part[i] for part in sums)) for i in range(len(entries))]
            values, present = snr.pooled(columns, rows, how, low, high)
        else:
            matrix, is_exact = metrics.values(grid, chosen, format_name)
            values = reduce_matrix(columns, matrix[:, shown], how)
            present = np.ones(values.shape, dtype=bool)
        exact = [True if pooled else is_exact] * len(entries)
        dtypes = grid.last_dtypes()
    else:
        all_series = query.series(index, entries, needs)
        rows, exact = [], []
        for one in all_series:
            row_steps, row_values, is_exact = metrics.layer_values(one, chosen, format_name)
            rows.append((row_steps, row_values))
            exact.append(is_exact)
        if other is not None:
            rows, exact = difference.subtract(
                query, other, tensor_type, entries, rows, exact, chosen, format_name
            )
        steps = union_steps([row_steps for row_steps, _ in rows], low, high)
        columns = Columns.split(steps, n_columns)
        if pooled:
            rows = [_sums_row(one, format_name, row[0]) for one, row in zip(all_series, rows)]
            values, present = snr.pooled(columns, rows, how, low, high)
        else:
            values, present = reduce_rows(columns, rows, how, low, high)
        dtypes = [one.last_dtype() for one in all_series]
    finite = values[present & np.isfinite(values)]
    value_range = {"min": float(finite.min()), "max": float(finite.max())} if finite.size else None
    return {
        "run": index.run,
        "minus_run": other.run if other is not None else None,
        "tensor_type": tensor_type,
        "metric": chosen.metric,
        "format": format_name,
        "reduce": how,
        "total_steps": len(columns.steps),
        "columns": Encoded(
            [
                {"step": a, "first_step": a, "last_step": b, "count": c}
                for a, b, c in zip(
                    columns.first_steps.tolist(),
                    columns.last_steps.tolist(),
                    columns.sizes.tolist(),
                )
            ]
        ),
        "layers": Encoded([_layer_json(e, dtype) for e, dtype in zip(entries, dtypes)]),
        "exact": exact,
        "values": Matrix(values, present),
        "value_range": value_range,
    }


def _check_block_format(
    format_name: fmt.Format | None,
    tensor_type: str,
    index: RunIndex,
    entries: list[TagEntry],
    other: RunIndex | None,
) -> None:
    """400 where a format that cannot be estimated (a block format) is asked of layers
    none of which recorded it (in the run, or in the run subtracted from it)."""
    if format_name is None or format_name.estimable:
        return
    where = f"the {tensor_type} layers of run {index.run!r}"
    block_routes.check_recorded(format_name, entries, where)
    if other is not None:
        matched = [other.entries.get((tensor_type, e.info.name)) for e in entries]
        where = f"the {tensor_type} layers of run {other.run!r}"
        block_routes.check_recorded(format_name, [m for m in matched if m], where)


def _sums_row(one: LayerSeries, format_name: fmt.BlockFormat, steps: np.ndarray) -> snr.SumsRow:
    """One layer's signal and error sums at ``steps`` (its steps holding the format)."""
    if not len(steps):
        return steps, *(np.zeros(0),) * 3
    return (one.steps, *snr.block_sums(one, format_name))


def series(query: Query, index: RunIndex) -> dict:
    params = query.params
    tensor_type = params.text("tensor_type")
    entries = [index.layer(tensor_type, name) for name in params.texts("layer", required=True)]
    format_name = _format(params)
    chosen = [metrics.metric(name, format_name) for name in params.texts("metric", required=True)]
    points = params.integer("points", low=1, high=MAX_POINTS)
    how = params.choice("reduce", REDUCTIONS, "max") if points is not None else None
    low, high = params.step_window()
    needs = Needs()
    for metric in chosen:
        needs = needs | metrics.needs(metric, format_name)
    if needs.format is not None and not needs.format.estimable:
        for entry in entries:
            block_routes.layer_block_formats(entry, [needs.format], index.run)
    listed = []
    for entry, layer_series in zip(entries, query.series(index, entries, needs)):
        steps = union_steps([layer_series.steps], low, high)
        columns = Columns.split(steps, points)
        for metric in chosen:
            held, values, exact = metrics.layer_values(layer_series, metric, format_name)
            if how is None:
                keep = np.isin(held, steps)
                out_steps, out_values = held[keep], values[keep]
            elif metric.metric == "snr_db":  # a point's records together
                row = (held, *snr.block_sums(layer_series, format_name))
                reduced, _ = snr.pooled(columns, [row], how, low, high)
                out_steps, out_values = columns.first_steps, reduced[0]
            else:
                reduced, _ = reduce_rows(columns, [(held, values)], how, low, high)
                out_steps, out_values = columns.first_steps, reduced[0]
            listed.append(
                {
                    "layer": entry.info.name,
                    "metric": metric.metric,
                    "exact": exact,
                    "steps": Numbers(out_steps),
                    "values": Numbers(out_values),
                }
            )
    return {
        "run": index.run,
        "tensor_type": tensor_type,
        "format": format_name,
        "reduce": how,
        "series": listed,
    }


def scalars(query: Query) -> dict:
    """The run's TensorBoard scalars, every stored step; 404 when the run has neither
    scalars nor numerics."""
    run = query.params.text("run")
    tags = query.params.texts("tag")
    data = query.scalars.read(query.ctx, query.experiment_id, run, tags or None)
    if not data and not tags:
        query.run(run)  # 404 unless it holds numerics
    listed = [
        {
            "tag": tag,
            "steps": Numbers(series.steps),
            "wall_times": Numbers(series.wall_times),
            "values": Numbers(series.values),
        }
        for tag, series in data.items()
    ]
    return {"run": run, "scalars": listed}
