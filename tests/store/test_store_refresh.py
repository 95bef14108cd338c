"""Reading new files is an explicit ``NumericsStore.refresh``, once per request for each
run the request reads (counted through TensorBoard's real WSGI app), and nothing else of
the store reads the files: a run's version, series and listing stay as of its last
refresh."""

from __future__ import annotations

import collections
import time

import numpy as np
import pytest

from tandv_tb.store import NumericsStore
from tandv_tb.store.series import Needs
from tests.helpers.plugin import TensorBoardApp, write_logdir
from tests.helpers.store_runs import write_run

STEPS = 12


@pytest.fixture
def counted(monkeypatch):
    """The runs each ``NumericsStore.refresh`` call was asked for, in order."""
    calls: list[str] = []
    real = NumericsStore.refresh

    def refresh(store: NumericsStore, run: str) -> int:
        calls.append(run)
        return real(store, run)

    monkeypatch.setattr(NumericsStore, "refresh", refresh)
    return calls


@pytest.fixture
def app(tmp_path, counted):
    write_logdir(tmp_path / "logs", steps=STEPS)
    app = TensorBoardApp(tmp_path / "logs", "python")
    app.wait_for(tags=32, max_step=STEPS - 1)
    yield app
    app.close()


REQUESTS = [
    ("layers", {"run": "alpha", "tensor_type": "Activation"}, ["alpha"]),
    ("steps", {"run": "alpha", "tensor_type": "Gradient"}, ["alpha"]),
    ("heatmap", {"run": "alpha", "tensor_type": "Activation", "metric": "mean"}, ["alpha"]),
    (
        "heatmap",
        {
            "run": "alpha",
            "minus_run": "nested/beta",
            "tensor_type": "Activation",
            "metric": "underflow_fraction",
            "format": "float8_e4m3fn",
        },
        ["alpha", "nested/beta"],
    ),
    (
        "series",
        {"run": "nested/beta", "tensor_type": "Weight", "layer": "embed", "metric": "rm2"},
        ["nested/beta"],
    ),
    (
        "histogram",
        {"run": "alpha", "tensor_type": "Activation", "layer": "embed", "step": 3},
        ["alpha"],
    ),
    ("heatmap.csv", {"run": "alpha", "tensor_type": "Weight", "metric": "std"}, ["alpha"]),
    ("scalars", {"run": "alpha"}, ["alpha"]),
    ("findings", {"run": ["nested/beta", "alpha"]}, ["alpha", "nested/beta"]),
    ("runs", {}, ["alpha", "nested/beta"]),
    ("formats", {}, []),
    ("metrics", {}, []),
]


def _built(app: TensorBoardApp, counted: list[str]) -> None:
    """Wait for the background build to have read both runs: from then on the ``runs``
    route refreshes both (a run never read is listed without reading it)."""
    deadline = time.monotonic() + 60
    while True:
        counted.clear()
        app.json("runs")
        if sorted(counted) == ["alpha", "nested/beta"]:
            return
        assert time.monotonic() < deadline, counted
        time.sleep(0.05)


@pytest.mark.parametrize(("route", "params", "runs"), REQUESTS, ids=[r[0] for r in REQUESTS])
def test_a_request_refreshes_each_run_it_reads_once(app, counted, route, params, runs):
    _built(app, counted)
    for _ in range(2):  # a first request, and one answered from the response cache
        counted.clear()
        response = app.get(route, **params)
        assert response.status_code == 200, response.get_data(as_text=True)
        assert collections.Counter(counted) == collections.Counter(runs)


def test_nothing_but_refresh_reads_the_files(tmp_path):
    run = tmp_path / "logs" / "r"
    write_run(run, range(5))
    store = NumericsStore(str(tmp_path / "logs"), tmp_path / "c", refresh_secs=0)
    try:
        version = store.refresh("r")
        tags = ["tandv/Activation/layers.0", "tandv/Activation/layers.1"]
        write_run(run, range(5, 9))  # a second file: new steps
        assert store.version("r") == version
        (series, _) = store.series("r", tags, Needs(("mean",)))
        assert series.steps.tolist() == list(range(5))
        assert store.grid("r", tags, Needs(("mean",))).steps.tolist() == list(range(5))
        assert store.tag_listing("r")[tags[0]][1] == 4
        assert store.refresh("r") > version
        (series, _) = store.series("r", tags, Needs(("mean",)))
        assert np.array_equal(series.steps, np.arange(9))
        assert store.tag_listing("r")[tags[0]][1] == 8
    finally:
        store.close()


def test_a_name_that_is_no_run_reads_nothing(tmp_path):
    write_run(tmp_path / "logs" / "r", range(3))
    store = NumericsStore(str(tmp_path / "logs"), tmp_path / "c", refresh_secs=0)
    try:
        for name in ("../logs/r", "nope", "r/..", ""):
            assert store.refresh(name) == 0
        assert store.runs() == ["r"]
        runs = store._database.cursor().execute("SELECT run FROM runs").fetchall()
        assert runs == []  # no run was given an id
    finally:
        store.close()
