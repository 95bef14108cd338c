"""The Findings card and the run-against-run heatmap in real headless Chromium, against a
real ``tensorboard`` over two real torch trainings whose answer is known: in ``poisoned`` a
module named with markup emits 3 NaN at step 7; ``clean`` is the same model trained with
another learning rate."""

from __future__ import annotations

import base64
import json
import math
import urllib.parse
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

playwright_api = pytest.importorskip("playwright.sync_api")
torch = pytest.importorskip("torch")

from tests.helpers.browser import TIMEOUT_MS, css, fetch, serve  # noqa: E402

HOSTILE = "<img src=x onerror=alert(1)>"
NAN_STEP = 7
STEPS = 12
RUNS = ("clean", "poisoned")

pytestmark = pytest.mark.timeout(180)


class Poison(torch.nn.Module):
    """The identity, but its output gets NaN at step ``at`` (None: never)."""

    def __init__(self, at: int | None) -> None:
        super().__init__()
        self.at, self.step = at, 0

    def forward(self, x):
        if self.step == self.at:
            x = x.clone()
            x.view(-1)[:3] = math.nan
        return x


def train(logdir: Path, lr: float, nan_at: int | None) -> None:
    """SGD on fixed random batches, every step tracked, with the loss as a scalar."""
    from torch.utils.tensorboard import SummaryWriter

    from tandv_tb.torch import track

    torch.manual_seed(0)
    poison = Poison(nan_at)
    model = torch.nn.Sequential(
        OrderedDict(
            [
                ("embed", torch.nn.Linear(8, 16)),
                (HOSTILE, poison),
                ("act", torch.nn.ReLU()),
                ("head", torch.nn.Linear(16, 1)),
            ]
        )
    )
    batches = [torch.randn(16, 8) for _ in range(STEPS)]
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    writer = SummaryWriter(str(logdir))
    with track(model, optimizer=optimizer, writer=writer) as tracker:
        for step, x in enumerate(batches):
            poison.step = step
            loss = model(x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            tracker.step()
            writer.add_scalar("loss", loss.item(), step)
    writer.close()


@pytest.fixture(scope="module")
def logdir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("findings_logdir")
    train(root / "clean", lr=5e-2, nan_at=None)
    train(root / "poisoned", lr=1e-2, nan_at=NAN_STEP)
    return root


@pytest.fixture(scope="module")
def tensorboard(logdir: Path) -> Iterator[str]:
    with serve(logdir, b'"poisoned"') as url:
        yield url


def tick(tab, run: str) -> None:
    """Tick ``run`` in the toolbar's run list and wait for the page to settle."""
    tab.frame.locator(f'[data-control="runs"] label[data-value="{css(run)}"] input').check()
    tab.ready("heatmap")


def findings_ready(tab) -> None:
    tab.frame.wait_for_selector(
        '[data-card="findings"]:is([data-state="ready"], [data-state="empty"]):not(.tv-loading)',
        timeout=TIMEOUT_MS,
    )


def matrix(body: dict) -> np.ndarray:
    """The heatmap's cells (NaN where missing)."""
    values = body["values"]
    dtype = {"float32": "<f4", "float64": "<f8"}[values["dtype"]]
    cells = np.frombuffer(base64.b64decode(values["data"]), dtype).astype(np.float64)
    return cells.reshape(values["shape"])


def test_card_names_the_nan_and_a_click_opens_it(tab, tensorboard):
    """The first NaN (an error) leads the card; its module's name, markup, shows as text;
    a click marks the heatmap cell of that layer at step 7 and opens its histogram."""
    tick(tab, "poisoned")
    findings_ready(tab)
    card = tab.frame.locator('[data-card="findings"]')
    first = card.locator(".tv-finding").first
    assert first.get_attribute("data-severity") == "error"
    nonfinite = card.locator('.tv-finding[data-kind="nonfinite"][data-run="poisoned"]')
    assert nonfinite.count() == 1
    assert nonfinite.get_attribute("data-step") == str(NAN_STEP)
    assert nonfinite.get_attribute("data-tensor-type") == "Activation"
    assert nonfinite.get_attribute("data-layer") == HOSTILE
    message = nonfinite.locator(".tv-finding-message").inner_text()
    assert repr(HOSTILE) in message and f"step {NAN_STEP}" in message
    # The poisoned run's headline is its NaN; the clean run has no problem.
    headline = card.locator('.tv-headline[data-run="poisoned"]')
    assert (headline.get_attribute("data-kind"), headline.get_attribute("data-step")) == (
        "nonfinite",
        str(NAN_STEP),
    )
    assert headline.inner_text().endswith(nonfinite.locator(".tv-finding-message").inner_text())
    clean = card.locator('.tv-headline[data-run="clean"]')
    assert (
        clean.get_attribute("data-problem") == "false" and "no problem found" in clean.inner_text()
    )
    # The same groups as the route (info folded away, not dropped), and behind them every
    # finding one per tensor.
    route = json.loads(fetch(tensorboard, "findings?run=clean&run=poisoned")[0])
    assert card.locator(".tv-finding-group").count() == len(route["groups"])
    card.locator("details.tv-findings-info").evaluate_all(
        "all => all.forEach(d => { d.open = true; })"
    )
    for each in card.locator("details.tv-findings-each").all():
        each.locator("summary").click()
    members = sum(len(g["findings"]) for g in route["groups"] if len(g["findings"]) > 1)
    singles = sum(len(g["findings"]) == 1 for g in route["groups"])
    assert card.locator(".tv-finding-member").count() == members
    assert members + singles == len(route["findings"])
    assert tab.frame.locator("img").count() == 0 and tab.page.locator("img").count() == 0

    nonfinite.click()
    assert nonfinite.get_attribute("aria-pressed") == "true"
    panel = tab.frame.locator(
        f'.tv-hist-panel[data-layer="{css(HOSTILE)}"][data-tensor-type="Activation"]'
    )
    panel.wait_for(timeout=TIMEOUT_MS)
    tab.ready("histogram")
    stats = panel.locator('.tv-hist-stats[data-run="poisoned"]')
    assert stats.get_attribute("data-step") == str(NAN_STEP)
    assert panel.locator(".tv-hist-layer").inner_text() == HOSTILE
    nan_bar = panel.locator('rect.tv-bar[data-run="poisoned"][data-bin="nan"]')
    assert int(nan_bar.get_attribute("data-count")) == 3
    marker = tab.frame.locator(".tv-cell-marker")
    marker.wait_for(state="visible", timeout=TIMEOUT_MS)
    assert marker.get_attribute("data-layer") == HOSTILE
    heat = json.loads(
        fetch(tensorboard, "heatmap?run=poisoned&tensor_type=Activation&metric=log2_rm2")[0]
    )
    names = [layer["layer"] for layer in heat["layers"]]
    column = heat["columns"][int(marker.get_attribute("data-column"))]
    assert column["first_step"] <= NAN_STEP <= column["last_step"]
    label = tab.frame.locator(f'.tv-row-label[data-kind="layer"][data-key="{css(HOSTILE)}"]')
    assert label.get_attribute("data-row") == marker.get_attribute("data-row")
    assert HOSTILE in names
    assert tab.frame.locator('select[name="heatmapRun"]').input_value() == "poisoned"
    assert tab.frame.locator("img").count() == 0


def test_difference_heatmap_is_the_two_runs_heatmaps_subtracted(tab, tensorboard):
    tick(tab, "poisoned")
    tab.frame.select_option('select[name="heatmapRun"]', "clean")
    tab.ready("heatmap")
    with tab.page.expect_response(lambda r: "minus_run=" in r.url) as caught:
        tab.frame.select_option('select[name="minusRun"]', "poisoned")
    tab.ready("heatmap")
    response = caught.value
    diff = response.json()
    assert (diff["run"], diff["minus_run"]) == ("clean", "poisoned")
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(response.url).query))
    own = {}
    for run in RUNS:
        params = {k: v for k, v in query.items() if k != "minus_run"} | {"run": run}
        own[run] = json.loads(fetch(tensorboard, "heatmap?" + urllib.parse.urlencode(params))[0])
    assert all(c["count"] == 1 for c in diff["columns"]), "one column per step expected"
    checked = 0
    for r, layer in enumerate(diff["layers"]):
        for c, column in enumerate(diff["columns"]):
            value = matrix(diff)[r, c]
            ab = []
            for run in RUNS:
                rows = [x["layer"] for x in own[run]["layers"]]
                steps = [x["step"] for x in own[run]["columns"]]
                ab.append(matrix(own[run])[rows.index(layer["layer"]), steps.index(column["step"])])
            a, b = ab
            if math.isnan(a) or math.isnan(b):
                assert math.isnan(value) or a == b
                continue
            want = 0.0 if a == b else a - b
            assert value == pytest.approx(want, rel=1e-5, abs=1e-5), (layer, column)
            checked += 1
    assert checked > 0
    assert any(v != 0 for v in matrix(diff).ravel() if math.isfinite(v))
    # Drawn on a diverging scale, labelled as a difference.
    legend = tab.frame.locator(".tv-heatmap").inner_text()
    assert "clean − poisoned" in legend
    canvas = tab.frame.locator("canvas.tv-heatmap-canvas")
    canvas.hover(position={"x": 3, "y": 3})
    tooltip = tab.frame.locator(".tv-tooltip")
    tooltip.wait_for(state="visible")
    assert "clean − poisoned" in tooltip.inner_text()


def test_a_divergence_opens_as_the_difference_of_its_runs(tab):
    """The two runs (another learning rate) part at once; a click on that finding shows the
    first run minus the other in the metric compared, the tensor's cell marked."""
    tick(tab, "poisoned")
    findings_ready(tab)
    divergence = tab.frame.locator('.tv-finding[data-kind="divergence"]')
    assert divergence.count() == 1
    assert divergence.get_attribute("data-run") == "clean"
    layer = divergence.get_attribute("data-layer")
    tensor_type = divergence.get_attribute("data-tensor-type")
    assert "'poisoned'" in divergence.inner_text()
    tab.frame.select_option('select[name="metric"]', "mean")
    tab.ready("heatmap")
    divergence.click()
    tab.frame.wait_for_selector(
        f'.tv-cell-marker[data-layer="{css(layer)}"]', state="visible", timeout=TIMEOUT_MS
    )
    tab.ready("heatmap")
    assert tab.frame.locator('select[name="heatmapRun"]').input_value() == "clean"
    assert tab.frame.locator('select[name="minusRun"]').input_value() == "poisoned"
    assert tab.frame.locator('select[name="tensorType"]').input_value() == tensor_type
    # The metric the divergence was found on (the route's ``divergence_metric``).
    assert tab.frame.locator('select[name="metric"]').input_value() == "log2_rm2"
    assert "clean − poisoned" in tab.frame.locator(".tv-legend-title").inner_text()
