"""The plugin's ``findings`` route through TensorBoard's real app (both loaders' listing)."""

from __future__ import annotations

import numpy as np
import pytest

import tandv_tb
from tandv_tb import NumericsWriter
from tandv_tb.diagnosis.cli import FOLD_HINT
from tests.helpers.findings_cli import cli
from tests.helpers.findings_groups import check_groups
from tests.helpers.plugin import TensorBoardApp

HOSTILE = "<img src=x onerror=alert(1)>\nlayer"
STEPS = 12
PART = 8  # run "b" parts from run "a" here


def _write(run_dir, nan_at: int | None, scale_from: int | None) -> None:
    """Two layers of 64 values; ``nan_at``: NaN in the hostile one; ``scale_from``: the
    other one 16 times larger from that step."""
    rng = np.random.default_rng(0)
    with NumericsWriter(str(run_dir)) as writer:
        for step in range(STEPS):
            values = rng.normal(size=64).astype(np.float32)
            bigger = values * (16.0 if scale_from is not None and step >= scale_from else 1.0)
            writer.add_numerics("fc", bigger, step)
            hostile = values.copy()
            if step == nan_at:
                hostile[:5] = np.nan
            writer.add_numerics(HOSTILE, hostile, step)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("findings_route")
    _write(logdir / "a", nan_at=4, scale_from=None)
    _write(logdir / "b", nan_at=None, scale_from=PART)
    return logdir


@pytest.fixture(scope="module", params=["python", "rust"])
def app(request, logdir):
    tb = TensorBoardApp(logdir, request.param)
    tb.wait_for(tags=4, max_step=STEPS - 1)
    yield tb
    tb.close()


def test_one_run(app):
    body = app.json("findings", run="a")
    assert body["runs"] == ["a"]
    first = body["findings"][0]
    assert first == {
        "run": "a",
        "step": 4,
        "kind": "nonfinite",
        "severity": "error",
        "tensor_type": "Activation",
        "name": HOSTILE,
        "value": 5.0,
        "message": first["message"],
        "other_run": None,
        "metric": "nonfinite_count",  # the heatmap metric that shows it
        "format": None,
    }
    assert "step 4" in first["message"]
    assert body["thresholds"]["divergence_metric"] == "log2_rm2"
    assert not [f for f in body["findings"] if f["kind"] == "divergence"]
    # the run's headline is its first error, that same finding
    assert body["headlines"] == [{"run": "a", "message": first["message"], "finding": 0}]
    assert body["compared"] == ""  # one run: no pair


def test_two_runs_part_and_most_severe_come_first(app):
    found = app.client.get("/data/plugin/tandv/findings?run=b&run=a").get_json()
    assert found["runs"] == ["a", "b"]
    parted = [f for f in found["findings"] if f["kind"] == "divergence"]
    assert [(f["run"], f["other_run"], f["step"], f["name"]) for f in parted] == [
        ("a", "b", PART, "fc")
    ]
    assert parted[0]["value"] == pytest.approx(-4.0)  # log2 rm2: 16 times is 4 binades
    assert parted[0]["metric"] == "log2_rm2"
    for listed in (found["findings"], found["groups"]):
        ranks = [("error", "warning", "info").index(f["severity"]) for f in listed]
        assert ranks == sorted(ranks)
    # the same tensors in both runs: comparable, compared
    assert found["compared"] == "Divergence: compared a with b"
    # every finding in exactly one group; a group's first finding is its condition's first
    members = sorted(i for g in found["groups"] for i in g["findings"])
    assert members == list(range(len(found["findings"])))
    for group in found["groups"]:
        first = found["findings"][group["findings"][0]]
        assert (first["run"], first["step"], first["kind"]) == (
            group["run"],
            group["step"],
            group["kind"],
        )
    resolved = [
        {**g, "findings": [found["findings"][i] for i in g["findings"]]} for g in found["groups"]
    ]
    check_groups(resolved, found["findings"])
    assert found["folds"] == []  # no recorded format: nothing expected of one to fold
    headlines = {h["run"]: h for h in found["headlines"]}
    assert found["findings"][headlines["a"]["finding"]]["kind"] == "nonfinite"
    # b has no problem of its own: the divergence is a's (the first of the pair)
    assert headlines["b"] == {"run": "b", "message": "no problem found", "finding": None}


def test_repeated_request_is_cached(app):
    first = app.get("findings", run="a").get_data()
    assert app.get("findings", run="a").get_data() == first


@pytest.mark.parametrize(
    "query, status",
    [
        ("", 400),
        ("?run=", 400),
        ("?run=nope", 404),
        ("?run=a&run=nope", 404),
        ("?" + "&".join(f"run=r{i}" for i in range(65)), 400),
        ("?run=" + "x" * 20_000, 400),
    ],
)
def test_bad_parameters(app, query, status):
    response = app.client.get("/data/plugin/tandv/findings" + query)
    assert response.status_code == status, response.get_data(as_text=True)
    assert "error" in response.get_json()


def test_the_route_and_the_python_api_agree(app, logdir, tmp_path):
    served = app.json("findings", run=["a", "b"])
    keys = ("run", "step", "kind", "severity", "tensor_type", "name", "message")
    frame = tandv_tb.findings(logdir, grouped=False, cache_dir=tmp_path)
    api = {tuple(row) for row in frame.drop(columns="value").itertuples(index=False)}
    assert {tuple(f[k] for k in keys) for f in served["findings"]} == api
    grouped = tandv_tb.findings(logdir, cache_dir=tmp_path)
    api = {tuple(row) for row in grouped.drop(columns="value").itertuples(index=False)}
    assert {(*(g[k] for k in keys), g["tensors"]) for g in served["groups"]} == api


def test_folds_are_the_lines_the_command_line_folds(tmp_path):
    """Values far below float8_e4m3fn's smallest subnormal in two tensor types: two
    underflow groups and their two scale groups, folded into one line as printed. One
    gradient also overflows (one value in 64 far above 448): it has an overflow group of
    its own, and its scale stays with the underflow it remedies too."""
    logdir = tmp_path / "logs"
    rng = np.random.default_rng(0)
    with NumericsWriter(str(logdir / "tiny"), formats=("float8_e4m3fn",)) as writer:
        for step in range(STEPS):
            for tensor_type in ("Gradient", "Weight_Gradient"):
                for name in ("fc1", "fc2"):
                    values = (rng.normal(size=64) * 1e-6).astype(np.float32)
                    if (tensor_type, name) == ("Gradient", "fc2"):
                        values[0] = 1e6
                    writer.add_numerics(name, values, step, tensor_type=tensor_type)
    tb = TensorBoardApp(logdir, "python")
    try:
        tb.wait_for(tags=4, max_step=STEPS - 1)
        found = tb.json("findings", run="tiny")
    finally:
        tb.close()
    resolved = [
        {**g, "findings": [found["findings"][i] for i in g["findings"]]} for g in found["groups"]
    ]
    check_groups(resolved, found["findings"])
    assert sorted((g["kind"], g["tensor_type"], g["tensors"]) for g in found["groups"]) == [
        ("overflow", "Gradient", 1),
        ("scale", "Gradient", 2),
        ("scale", "Weight_Gradient", 2),
        ("underflow", "Gradient", 2),
        ("underflow", "Weight_Gradient", 2),
    ]
    (fold,) = found["folds"]
    kinds = sorted(found["groups"][i]["kind"] for i in fold["groups"])
    assert kinds == ["scale", "scale", "underflow", "underflow"]
    assert (fold["run"], fold["kind"], fold["format"], fold["tensors"]) == (
        "tiny",
        "underflow",
        "float8_e4m3fn",
        4,
    )
    (headline,) = found["headlines"]
    assert headline["message"].startswith("float8_e4m3fn overflows from step 0: Gradient 'fc2'")
    printed = cli("findings", str(logdir)).stdout.splitlines()
    (line,) = [line for line in printed if " underflow " in line]
    assert line.endswith(f"  {fold['message']}{FOLD_HINT}")
    assert fold["message"].startswith("float8_e4m3fn without a scale (expected): 4 of 4 tensors")
