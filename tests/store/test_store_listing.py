"""Runs and tags listed from the plugin's own store (``plugin.listing.store_tags``): a new
run is listed within one reload, a deleted one disappears, a restart lists runs without
TensorBoard's data provider (``--logdir_spec`` and remote logdirs:
``tests/plugin/test_remote_logdirs.py``); and the
fast paths of a heatmap (a column read alone in a known row order, one matrix reduced at
once) give what the general paths give."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from tensorboard import context as tb_context

from tandv_tb.plugin.downsample import REDUCTIONS, Columns, reduce_rows
from tandv_tb.store import NumericsStore
from tests.helpers.plugin import PluginRoutes, TensorBoardProcess, unread_provider
from tests.helpers.store_runs import ROUTES, write_run


def _listed(server: TensorBoardProcess) -> list[str]:
    return [run["run"] for run in server.json(ROUTES + "runs")["runs"]]


def test_a_new_run_is_listed_and_a_deleted_one_disappears(tmp_path):
    write_run(tmp_path / "logs" / "a", range(5))
    server = TensorBoardProcess(tmp_path / "logs", "true", f"--tandv_cache_dir={tmp_path / 'c'}")
    try:
        server.wait(lambda: _listed(server) == ["a"], "run a to be listed")
        write_run(tmp_path / "logs" / "b", range(3))
        server.wait(lambda: _listed(server) == ["a", "b"], "the new run b to be listed", 20)
        (b,) = [r for r in server.json(ROUTES + "runs")["runs"] if r["run"] == "b"]
        assert b["max_step"] == 2 and b["layer_count"] == 2
        assert (
            server.json(ROUTES + "layers?run=b&tensor_type=Activation")["layers"][0]["steps"] == 3
        )
        shutil.rmtree(tmp_path / "logs" / "a")
        server.wait(lambda: _listed(server) == ["b"], "the deleted run a to disappear", 20)
        status, _, _ = server.get(ROUTES + "layers?run=a&tensor_type=Activation")
        assert status == 404
    finally:
        server.close()


def test_a_restart_lists_runs_and_tags_from_the_store_not_the_provider(tmp_path, monkeypatch):
    monkeypatch.setattr(NumericsStore, "build_in_background", lambda store: None)  # requests read
    write_run(tmp_path / "logs" / "r", range(9), layers=3)
    write_run(tmp_path / "logs" / "deep" / "s", range(4))
    ctx = tb_context.RequestContext()
    logdir, cache = tmp_path / "logs", tmp_path / "c"
    first = PluginRoutes(unread_provider(tmp_path), logdir, cache)
    listed = first.json("runs")["runs"]  # from their first bytes: not built to list them
    assert [(r["run"], r["layer_count"], r["max_step"]) for r in listed] == [
        ("deep/s", 2, 3),
        ("r", 3, 8),
    ]
    assert not first.plugin._store.has_read("r")
    for run in ("r", "deep/s"):  # a data route reads a run
        first.json("layers", run=run, tensor_type="Activation")
    assert first.plugin._store.has_read("r")
    first.close()
    again = PluginRoutes(unread_provider(tmp_path), logdir, cache)  # a restart
    try:
        assert again.plugin.is_active()  # the store holds tags: no event file read for that
        assert [run["run"] for run in again.json("runs")["runs"]] == ["deep/s", "r"]
        indexes = again.plugin._listing.runs(ctx, "")  # as the runs route listed them
        assert list(indexes) == ["deep/s", "r"]
        layers = indexes["r"].layers("Activation")
        assert [e.info.name for e in layers] == ["layers.0", "layers.1", "layers.2"]
        assert {e.max_step for e in layers} == {8}
    finally:
        again.close()


def test_a_column_read_alone_in_a_known_order_is_the_full_read(tmp_path):
    write_run(tmp_path / "logs" / "r", range(0, 30, 3), layers=3)
    write_run(tmp_path / "logs" / "r", range(1, 30, 3), layers=3)  # a second file, interleaved
    db = NumericsStore(str(tmp_path / "logs"), tmp_path / "c", refresh_secs=0)
    db.refresh("r")
    ids = sorted(tag_id for tag_id, info, _ in db.tags("r").values() if info is not None)
    first = db.rows("r", ids, ("mean",))
    layout, _ = db._reader.layout("r", ids, ("mean",))
    alone = db._reader.columns("r", ids, ("std", "max_abs"), layout)
    full = db.rows("r", ids, ("std", "max_abs"))
    np.testing.assert_array_equal(first.steps, full.steps)
    np.testing.assert_array_equal(first.tag_ids, full.tag_ids)
    for name in ("std", "max_abs"):
        np.testing.assert_array_equal(alone[name], layout.shape(full.columns[name]))
    assert sorted(set(full.steps.tolist())) == sorted([*range(0, 30, 3), *range(1, 30, 3)])


@pytest.mark.parametrize("how", REDUCTIONS)
def test_rows_recorded_at_the_same_steps_reduce_as_cell_by_cell(how):
    rng = np.random.default_rng(3)
    steps = np.sort(rng.choice(10_000, 257, replace=False))
    values = [rng.normal(size=len(steps)) for _ in range(6)]
    values[2][17] = np.nan
    columns = Columns.split(steps, 40)
    out, present = reduce_rows(columns, [(steps.copy(), v) for v in values], how)
    assert present.all()
    pick = {"max": np.max, "min": np.min, "mean": np.mean, "last": lambda a: a[-1]}[how]
    for row, v in enumerate(values):
        for col in range(len(columns)):
            expected = pick(v[columns.bounds[col] : columns.bounds[col + 1]])
            np.testing.assert_allclose(out[row, col], expected, rtol=1e-12)
