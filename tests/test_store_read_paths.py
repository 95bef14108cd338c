"""The store's faster read paths give what its general ones give: casts read in a layout's
row order (and the general sort where a step was written twice), NaN statistics kept NaN,
and the numbers of a run written in several transactions."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from tandv_tb import numerics_ingest
from tandv_tb.disk.event_reader import read_chunk
from tandv_tb.numerics_db import NumericsDB
from tandv_tb.numerics_rows import HeldLayout
from tandv_tb.writer import NumericsWriter, RecordItem
from tests.plugin_helpers import make_record

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


def _casts_both_ways(db: NumericsDB, run: str, index: int):
    db.refresh(run)
    ids = sorted(tag_id for tag_id, info, _ in db.tags(run).values() if info is not None)
    layout = db.rows(run, ids, ("numel",))
    general = db.casts(run, dict.fromkeys(ids, index))
    fast = db.casts(run, dict.fromkeys(ids, index), layout=layout)
    return layout, general, fast


def test_casts_in_the_layout_order_equal_the_general_read(tmp_path, monkeypatch):
    # small chunks, several gathered in each transaction
    monkeypatch.setattr(
        numerics_ingest, "read_chunk", functools.partial(read_chunk, max_bytes=3000)
    )
    monkeypatch.setattr(numerics_ingest, "BATCH_RECORDS", 20)
    _write(tmp_path / "logs" / "run", list(range(40)))
    db = NumericsDB(str(tmp_path / "logs"), tmp_path / "cache", refresh_secs=0)
    try:
        db.refresh("run")
        (n_values,) = db._cursor().execute("SELECT n_values FROM files").fetchone()
        assert n_values == 40 * 3  # every record, read a few at a time
        for index in range(len(FORMATS)):
            layout, general, fast = _casts_both_ways(db, "run", index)
            assert fast.order is layout.order  # the layout path was taken
            assert np.array_equal(general.tag_ids, fast.tag_ids)
            assert np.array_equal(general.steps, fast.steps)
            for name in ("underflow", "overflow"):
                assert np.array_equal(general.columns[name], fast.columns[name])
    finally:
        db.close()


def test_a_step_written_twice_takes_the_general_read(tmp_path):
    run = tmp_path / "logs" / "run"
    _write(run, list(range(10)))
    _write(run, [4, 5])  # a second file (a resumed run): steps 4 and 5 again
    db = NumericsDB(str(tmp_path / "logs"), tmp_path / "cache", refresh_secs=0)
    try:
        layout, general, fast = _casts_both_ways(db, "run", 1)
        assert len(layout.order) < layout.n_read  # rows of the first file's 4 and 5 dropped
        assert layout.steps.tolist()[:10] == list(range(10))
        assert np.array_equal(general.columns["underflow"], fast.columns["underflow"])
        assert np.array_equal(general.steps, fast.steps)
    finally:
        db.close()


def test_a_nan_statistic_stays_nan(tmp_path):
    _write(tmp_path / "logs" / "run", list(range(6)), empty_at=3)  # no values: NaN statistics
    db = NumericsDB(str(tmp_path / "logs"), tmp_path / "cache", refresh_secs=0)
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


def _same_rows(a, b) -> None:
    assert a.tag_ids.dtype == b.tag_ids.dtype and a.steps.dtype == b.steps.dtype
    assert a.tag_ids.tolist() == b.tag_ids.tolist() and a.steps.tolist() == b.steps.tolist()
    assert a.order is b.order and a.n_read == b.n_read
    assert [a.bounds(t) for t in range(-1, 4)] == [b.bounds(t) for t in range(-1, 4)]


def test_a_held_layout_gives_back_every_rows_tag_and_step(tmp_path):
    """Layers at the same steps: kept compact (a fraction of the size), made again exactly;
    layers at different steps (the last layer not written at the last step): kept whole."""
    _write(tmp_path / "logs" / "same", list(range(0, 60, 3)))
    _write(tmp_path / "logs" / "gap", list(range(30)))
    _write(tmp_path / "logs" / "gap", [30], layers=2)
    db = NumericsDB(str(tmp_path / "logs"), tmp_path / "cache", refresh_secs=0)
    try:
        for run, compact in (("same", True), ("gap", False)):
            db.refresh(run)
            ids = [db.tags(run)[f"tandv/Activation/layers.{i}"][0] for i in range(3)]
            layout = db.rows(run, ids, ())
            held = HeldLayout.of(layout)
            assert (held.tags is not None) == compact
            _same_rows(held.layout(), layout)
            if compact:
                assert held.nbytes() * 2 < layout.nbytes()  # 4 bytes a row against 16
            again = db.rows(run, ids, ("mean",), layout=held.layout())
            assert again.order is layout.order  # only the column was read
            whole = db.rows(run, ids, ("mean",))
            assert again.columns["mean"].tobytes() == whole.columns["mean"].tobytes()
    finally:
        db.close()
