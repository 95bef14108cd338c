"""What the store gives the routes (``NumericsStore.series``, ``grid`` and ``record``):
numpy columns of exactly the values written, a grid's [tags, steps] matrices row by row
equal to each tag's series, in the order the tags were asked for, and no grid where the
tags differ in steps or formats."""

from __future__ import annotations

import numpy as np
import pytest

from tandv_tb.store import NumericsStore
from tandv_tb.store.series import LayerGrid, Needs
from tandv_tb.writer import NumericsWriter, RecordItem
from tests.helpers.plugin import make_record, stored

FORMATS = ("float8_e4m3fn", "float8_e5m2")
LAYERS = 4


def _tag(layer: int) -> str:
    return f"tandv/Activation/layers.{layer}"


@pytest.fixture
def store(tmp_path):
    """Run ``same``: every layer at steps 0, 2, .., 18; ``gap``: layer 3 misses step 18;
    ``mixed``: layer 1 records only the first format. Yields the store and what was
    written, ``{(run, layer, step): record as stored}``."""
    rng = np.random.default_rng(11)
    written = {}
    for run in ("same", "gap", "mixed"):
        with NumericsWriter(str(tmp_path / "logs" / run)) as writer:
            for step in range(0, 20, 2):
                items = []
                for layer in range(LAYERS):
                    if run == "gap" and (layer, step) == (3, 18):
                        continue
                    formats = FORMATS[:1] if run == "mixed" and layer == 1 else FORMATS
                    record = make_record(rng, ("float32", "bfloat16")[step % 4 // 2], formats)
                    written[run, layer, step] = stored(record)
                    items.append(RecordItem(f"layers.{layer}", record, order=layer))
                writer.add_records(step, items)
    found = NumericsStore(str(tmp_path / "logs"), tmp_path / "c", refresh_secs=0)
    for run in ("same", "gap", "mixed"):
        found.refresh(run)
    yield found, written
    found.close()


def test_series_hold_the_values_written(store):
    db, written = store
    needs = Needs(("mean", "max_abs", "zero_count"), "float8_e5m2")
    tags = [_tag(layer) for layer in (2, 0, 3)]
    for layer, series in zip((2, 0, 3), db.series("gap", tags, needs)):
        steps = sorted(step for run, lay, step in written if (run, lay) == ("gap", layer))
        assert series.name == f"layers.{layer}" and series.formats == FORMATS
        assert series.steps.tolist() == steps
        records = [written["gap", layer, step] for step in steps]
        assert series.statistic("mean").tolist() == [r.statistics["mean"] for r in records]
        assert series.statistic("max_abs").tolist() == [r.statistics["max_abs"] for r in records]
        assert series.count("zero_count").tolist() == [r.zero_count for r in records]
        assert [series.dtype(row) for row in range(len(series))] == [r.dtype for r in records]
        underflow, overflow = series.casts("float8_e5m2")
        assert underflow.tolist() == [r.underflow["float8_e5m2"] for r in records]
        assert overflow.tolist() == [r.overflow["float8_e5m2"] for r in records]


@pytest.mark.parametrize("order", [(0, 1, 2, 3), (3, 1, 0, 2)])
@pytest.mark.parametrize("format_name", [None, "float8_e4m3fn"])
def test_a_grid_is_its_tags_series_as_rows(store, order, format_name):
    db, written = store
    tags = [_tag(layer) for layer in order]
    needs = Needs(("std", "numel"), format_name)
    grid = db.grid("same", tags, needs)
    assert isinstance(grid, LayerGrid) and grid.formats == FORMATS
    assert grid.steps.tolist() == list(range(0, 20, 2))
    names = ["std", "numel", "dtype_code"]
    if format_name is not None:
        names += [f"underflow:{format_name}", f"overflow:{format_name}"]
    assert sorted(grid.columns) == sorted(names)
    for name in names:
        assert grid.columns[name].shape == (len(order), 10)
    for row, series in enumerate(db.series("same", tags, needs)):
        assert np.array_equal(series.steps, grid.steps)
        for name in names:
            assert grid.columns[name][row].tobytes() == series.columns[name].tobytes(), name
    layer = order[1]  # a row checked against what was written, not only against the series
    assert grid.statistic("std")[1].tolist() == [
        written["same", layer, step].statistics["std"] for step in range(0, 20, 2)
    ]
    assert grid.last_dtypes() == [written["same", lay, 18].dtype for lay in order]


def test_no_grid_where_the_tags_differ(store):
    db, _ = store
    tags = [_tag(layer) for layer in range(LAYERS)]
    assert db.grid("gap", tags, Needs(("mean",))) is None  # layer 3 lacks step 18
    assert db.grid("gap", tags[:3], Needs(("mean",))) is not None
    assert db.grid("mixed", tags, Needs(("mean",))) is not None  # no format asked
    assert db.grid("mixed", tags, Needs(("mean",), "float8_e4m3fn")) is None  # formats differ
    assert db.grid("same", [*tags, "tandv/Activation/unknown"], Needs(("mean",))) is None
    assert db.grid("same", [], Needs(("mean",))) is None


def test_an_unknown_tag_is_an_empty_series(store):
    db, _ = store
    known, unknown = db.series("same", [_tag(0), "no/such/tag"], Needs(("mean",), FORMATS[0]))
    assert len(known) == 10 and len(unknown) == 0
    assert unknown.name == "no/such/tag" and unknown.formats == ()
    assert unknown.statistic("mean").size == 0


def test_a_record_is_the_step_nearest_to_the_one_asked(store):
    db, written = store
    for asked, held in ((None, 16), (0, 0), (7, 6), (9, 8), (100, 16)):
        step, record = db.record("gap", _tag(3), asked)
        assert step == held
        assert record == written["gap", 3, held]
    assert db.record("gap", "no/such/tag", 3) is None
