"""The store's faster read paths give what its general ones give: casts read in a layout's
row order (and the general sort where a step was written twice), columns arranged by a
held layout, heatmaps of layers at the same steps computed as one matrix, NaN statistics
kept NaN, and the numbers of a run written in several transactions."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer

from tandv_tb.event_files.event_reader import read_chunk
from tandv_tb.plugin import metrics, numerics_routes
from tandv_tb.plugin.responses import dumps
from tandv_tb.store import NumericsStore, ingest
from tandv_tb.store.results import fetch
from tandv_tb.writer import NumericsWriter, RecordItem
from tests.helpers.block_runs import write_block_run
from tests.helpers.plugin import make_record, store_query

FORMATS = ("float8_e4m3fn", "float8_e5m2")


def _write(run_dir: Path, steps: list[int], layers: int = 3, empty_at: int | None = None) -> None:
    rng = np.random.default_rng(len(steps))
    with NumericsWriter(str(run_dir), formats=FORMATS) as writer:
        for step in steps:
            items = [
                RecordItem(
                    f"layers.{i}",
                    make_record(
                        rng, "float32", FORMATS, "empty" if (step, i) == (empty_at, 1) else "normal"
                    ),
                )
                for i in range(layers)
            ]
            writer.add_records(step, [item._replace(order=i) for i, item in enumerate(items)])


def _casts_both_ways(db: NumericsStore, run: str, index: int):
    db.refresh(run)
    ids = sorted(tag_id for tag_id, info, _ in db.tags(run).values() if info is not None)
    rows = db.rows(run, ids, ("numel",))
    layout, _ = db._reader.layout(run, ids, ("numel",))
    general = db.casts(run, dict.fromkeys(ids, index))
    fast = db._reader.per_format_in(
        run, "casts", dict.fromkeys(ids, index), ("underflow", "overflow"), layout
    )
    return rows, layout, general, fast


def test_casts_in_the_layout_order_equal_the_general_read(tmp_path, monkeypatch):
    # small chunks, several gathered in each transaction
    small_chunks = functools.partial(read_chunk, max_bytes=3000)
    monkeypatch.setattr("tandv_tb.store.logdir.read_chunk", small_chunks)
    monkeypatch.setattr(ingest, "BATCH_RECORDS", 20)
    _write(tmp_path / "logs" / "run", list(range(40)))
    db = NumericsStore(str(tmp_path / "logs"), tmp_path / "cache", refresh_secs=0)
    try:
        db.refresh("run")
        (n_values,) = db._database.cursor().execute("SELECT n_values FROM files").fetchone()
        assert n_values == 40 * 3  # every record, read a few at a time
        for index in range(len(FORMATS)):
            rows, layout, general, fast = _casts_both_ways(db, "run", index)
            assert fast is not None  # the layout path was taken
            assert np.array_equal(general.tag_ids, rows.tag_ids)
            assert np.array_equal(general.steps, rows.steps)
            for name in ("underflow", "overflow"):
                assert np.array_equal(layout.shape(general.columns[name]), fast[name])
    finally:
        db.close()


def test_a_step_written_twice_takes_the_general_read(tmp_path):
    run = tmp_path / "logs" / "run"
    _write(run, list(range(10)))
    _write(run, [4, 5])  # a second file (a resumed run): steps 4 and 5 again
    db = NumericsStore(str(tmp_path / "logs"), tmp_path / "cache", refresh_secs=0)
    try:
        rows, layout, general, fast = _casts_both_ways(db, "run", 1)
        assert len(layout.order) < layout.n_read  # rows of the first file's 4 and 5 dropped
        assert rows.steps.tolist()[:10] == list(range(10))
        assert fast is None  # which of two rows at one step is whose: not from tags and steps
        assert np.array_equal(general.steps, rows.steps)
    finally:
        db.close()


def test_a_nan_statistic_stays_nan(tmp_path):
    _write(tmp_path / "logs" / "run", list(range(6)), empty_at=3)  # no values: NaN statistics
    db = NumericsStore(str(tmp_path / "logs"), tmp_path / "cache", refresh_secs=0)
    try:
        db.refresh("run")
        tag_id = db.tags("run")["tandv/Activation/layers.1"][0]
        rows = db.rows("run", [tag_id], ("mean", "numel"))
        at = rows.steps.tolist().index(3)
        assert rows.columns["numel"][at] == 0
        assert np.isnan(rows.columns["mean"][at])  # NaN, not a NULL read back as something
        assert np.isfinite(np.delete(rows.columns["mean"], at)).all()
    finally:
        db.close()


def test_a_held_layout_arranges_a_column_as_the_full_read(tmp_path):
    """Layers at the same steps, stored step by step: a transposed view of the stored
    column; the same, written in two interleaved files: a grid gathered in order; layers
    at different steps (the last layer not written at the last step): rows kept whole."""
    _write(tmp_path / "logs" / "same", list(range(0, 60, 3)))
    _write(tmp_path / "logs" / "two", list(range(0, 30, 3)))
    _write(tmp_path / "logs" / "two", list(range(1, 30, 3)))
    _write(tmp_path / "logs" / "gap", list(range(30)))
    _write(tmp_path / "logs" / "gap", [30], layers=2)
    db = NumericsStore(str(tmp_path / "logs"), tmp_path / "cache", refresh_secs=0)
    try:
        for run, grid, gathered in (
            ("same", True, False),
            ("two", True, True),
            ("gap", False, True),
        ):
            db.refresh(run)
            ids = [db.tags(run)[f"tandv/Activation/layers.{i}"][0] for i in range(3)]
            rows = db.rows(run, ids, ("mean",))
            layout, _ = db._reader.layout(run, ids, ("mean",))
            assert (layout.grid is not None, layout.order is not None) == (grid, gathered)
            alone = db._reader.columns(run, ids, ("mean", "numel"), layout)
            if not gathered:  # nothing written: a view of what DuckDB returned
                assert not alone["mean"].flags.owndata
            full = db.rows(run, ids, ("mean", "numel"))
            for name in ("mean", "numel"):
                assert np.array_equal(alone[name], layout.shape(full.columns[name]))
            for tag_id in ids:
                start, end = rows.index.bounds(tag_id)
                assert layout.steps_of(tag_id).tolist() == rows.steps[start:end].tolist()
                part = layout.part(alone["mean"], tag_id)
                assert part.tobytes() == rows.columns["mean"][start:end].tobytes()
            assert layout.part(alone["mean"], -1).size == layout.steps_of(-1).size == 0
            assert layout.matches(*_stored_tags_and_steps(db, run, ids))
    finally:
        db.close()


def _stored_tags_and_steps(db: NumericsStore, run: str, ids: list[int]):
    table = fetch(
        db._database.cursor(),
        "SELECT tag_id, step FROM records WHERE list_contains(?, tag_id) "
        "AND run_id = (SELECT run_id FROM runs WHERE run = ?)",
        [ids, run],
    )
    return table["tag_id"], table["step"]


def _write_kinds(run_dir: Path, steps: int, layers: int) -> None:
    """Layers at every step, some records empty (NaN statistics) or holding NaN and Inf."""
    rng = np.random.default_rng(5)
    with NumericsWriter(str(run_dir), formats=FORMATS) as writer:
        for step in range(steps):
            kinds = ["empty" if (step + i) % 7 == 0 else "normal" for i in range(layers)]
            if step == 9:
                kinds[1] = "nonfinite"
            items = [
                RecordItem(f"layers.{i}", make_record(rng, "bfloat16", FORMATS, kind), order=i)
                for i, kind in enumerate(kinds)
            ]
            writer.add_records(step, items)


def test_a_grid_heatmap_equals_the_layer_by_layer_one(tmp_path, monkeypatch):
    """Layers at the same steps are computed as one matrix (``NumericsStore.grid``); the
    same heatmaps computed layer by layer (the path of layers at different steps) are the
    same bytes, for every metric (with an element format, and with a block-scaled one in a
    run that records it), reduction, column count and step window."""
    logdir = tmp_path / "logs"
    _write_kinds(logdir / "run", steps=24, layers=4)
    write_block_run(logdir / "blocks")
    provider = data_provider.MultiplexerDataProvider(
        plugin_event_multiplexer.EventMultiplexer(), str(logdir)
    )
    store = NumericsStore(str(logdir), str(tmp_path / "cache"))
    for run in ("run", "blocks"):
        store.refresh(run)

    def heatmap(run: str, **args) -> str:
        query = store_query(store, provider, tensor_type="Activation", **args)
        return dumps(numerics_routes.heatmap(query, query.run(run)))

    asked = []
    for run, format_name in (("run", "float8_e5m2"), ("blocks", "mxfp4_e2m1")):
        for name, metric in metrics.METRICS.items():
            if metric.needs_block_format and run == "run":
                continue  # a metric of block formats: the run that records one
            for how in ("max", "min", "mean", "last"):
                for window in ({}, {"step_min": 3, "step_max": 17}):
                    args = {"run": run, "metric": name, "reduce": how, "columns": 5, **window}
                    if metric.needs_format:
                        args["format"] = format_name
                    asked.append(args)
    asked.append({"run": "run", "metric": "log2_rm2", "columns": 1000})
    assert any(a["metric"] == "snr_db" for a in asked)
    taken = []
    grid = store.grid
    monkeypatch.setattr(store, "grid", lambda *a: taken.append(grid(*a)) or taken[-1])
    as_grid = [heatmap(**args) for args in asked]
    assert all(found is not None for found in taken)  # each one took the grid path
    monkeypatch.setattr(store, "grid", lambda *a: None)
    try:
        for args, body in zip(asked, as_grid):
            assert heatmap(**args) == body, args
    finally:
        store.close()
