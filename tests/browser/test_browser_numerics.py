"""The Numerics tab in a real browser: Debian's Chromium (headless, through Playwright)
against a real ``tensorboard`` process over a logdir of two runs written by
``NumericsWriter`` and PyTorch's ``SummaryWriter``.

Screenshots land in ``tests/artifacts/`` (git-ignored).
"""

from __future__ import annotations

import math
import os
import shutil
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

playwright_api = pytest.importorskip("playwright.sync_api")

from tandv_tb.frame import read_frame  # noqa: E402
from tandv_tb.writer import NumericsWriter  # noqa: E402
from tests.helpers import REPO  # noqa: E402
from tests.helpers.browser import (  # noqa: E402
    ARTIFACTS,
    TIMEOUT_MS,
    Tab,
    heatmap_bench_script,
    open_tab,
    reopen,
    serve,
)

HOSTILE = "<img src=x onerror=alert(1)>"
LAYERS = (
    "embed",
    "blocks.0.attn",
    "blocks.0.mlp",
    "blocks.1.attn",
    "blocks.1.mlp",
    "head",
    HOSTILE,
)
#: log2 of each layer's typical magnitude: small ones underflow float8_e4m3fn, head overflows.
SCALES = {"embed": 0, "blocks.0.attn": -7, "blocks.0.mlp": -2, "blocks.1.attn": -9}
STEPS = tuple(range(0, 40, 2))
RUNS = ("alpha", "beta")
RECORDED = ("float8_e4m3fn",)

pytestmark = pytest.mark.timeout(120)


def _tensor(rng: np.random.Generator, run: str, layer: str, step: int) -> np.ndarray:
    exponent = SCALES.get(layer, 1) + step / 40 - RUNS.index(run)
    values = rng.standard_normal(3000).astype(np.float32) * np.float32(2.0**exponent)
    values[:25] = 0.0
    if layer == "head":
        values[25:40] *= 400  # some beyond float8_e4m3fn's 448
    if run == "beta" and layer == "blocks.1.mlp" and step == 20:
        values[50] = np.nan
    return values


def write_logdir(root: Path, runs=RUNS, steps=STEPS) -> None:
    """Numerics of every layer (Activation and Gradient) and a loss curve per run."""
    from torch.utils.tensorboard import SummaryWriter

    rng = np.random.default_rng(7)
    for run in runs:
        summary = SummaryWriter(str(root / run))
        writer = NumericsWriter(writer=summary, formats=RECORDED)
        for step in steps:
            for layer in LAYERS:
                values = _tensor(rng, run, layer, step)
                writer.add_numerics(layer, values, step, tensor_type="Activation")
                writer.add_numerics(layer, values * np.float32(1e-3), step, tensor_type="Gradient")
            summary.add_scalar("loss", 2.0 / (step + 1) + 0.2 * RUNS.index(run), step)
        writer.close()
        summary.close()


@pytest.fixture(scope="module")
def logdir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("browser_logdir")
    write_logdir(root)
    return root


@pytest.fixture(scope="module")
def tensorboard(logdir: Path) -> Iterator[str]:
    with serve(logdir, b'"beta"') as url:
        yield url


class NumericsTab(Tab):
    """The tab over this module's logdir (one heatmap column per recorded step)."""

    def click_cell(self, layer: str, step: int) -> None:
        """Click the heatmap cell of ``layer`` at ``step``."""
        heatmap = self.frame.locator(".tv-heatmap")
        rows = int(heatmap.get_attribute("data-rows"))
        columns = int(heatmap.get_attribute("data-columns"))
        assert columns == len(STEPS), "expected one column per recorded step"
        row = int(self.label(layer).get_attribute("data-row"))
        canvas = self.frame.locator("canvas.tv-heatmap-canvas")
        box = canvas.bounding_box()
        x = (STEPS.index(step) + 0.5) * box["width"] / columns
        y = (row + 0.5) * box["height"] / rows
        canvas.click(position={"x": x, "y": y})

    def bars(self, layer: str, run: str) -> dict[str, int]:
        """``{bin: count}`` of the drawn bars (bins, and zero/nan/+inf/-inf)."""
        rects = self.panel(layer).locator(f'rect.tv-bar[data-run="{run}"]')
        pairs = rects.evaluate_all("rs => rs.map(r => [r.dataset.bin, Number(r.dataset.count)])")
        return dict(pairs)


@pytest.fixture
def tab(session) -> NumericsTab:
    """The Numerics tab afresh: saved state cleared and the plugin's frame reloaded."""
    opened = reopen(session)
    return NumericsTab(opened.page, opened.frame)


def _frame_row(logdir: Path, run: str, layer: str, step: int, tensor_type="Activation", **kw):
    frame = read_frame(logdir, run=run, **kw)
    meta = frame["metadata"]
    chosen = frame[
        (meta["name"] == layer) & (meta["step"] == step) & (meta["tensor_type"] == tensor_type)
    ]
    assert len(chosen) == 1
    return chosen.iloc[0]


def test_tab_opens_with_layer_rows_in_model_order(tab):
    labels = tab.frame.locator('.tv-row-label[data-kind="layer"]')
    assert labels.evaluate_all("ls => ls.map(l => l.dataset.key)") == list(LAYERS)
    groups = tab.frame.locator('.tv-row-label[data-kind="group"]')
    assert "blocks" in groups.evaluate_all("ls => ls.map(l => l.dataset.key)")
    heatmap = tab.frame.locator(".tv-heatmap")
    canvas_width = tab.frame.locator("canvas.tv-heatmap-canvas").bounding_box()["width"]
    assert int(heatmap.get_attribute("data-columns")) <= canvas_width
    tab.screenshot("heatmap")

    # A collapsed group is one row; a click on its label opens it again.
    tab.frame.locator('.tv-row-label[data-kind="group"][data-key="blocks"]').click()
    tab.frame.wait_for_selector('.tv-row-label[data-key="blocks.0.attn"]', state="detached")
    assert tab.frame.locator('.tv-row-label[data-kind="layer"]').count() == len(LAYERS) - 4
    tab.frame.locator('.tv-row-label[data-kind="group"][data-key="blocks"]').click()
    tab.frame.wait_for_selector('.tv-row-label[data-key="blocks.0.attn"]')

    # Zoom over steps: the wheel narrows the window and the server sends just its columns.
    heatmap_canvas = tab.frame.locator("canvas.tv-heatmap-canvas")
    heatmap_canvas.hover(position={"x": 20, "y": 10})
    tab.page.mouse.wheel(0, -600)
    tab.frame.wait_for_selector('[data-control="resetZoom"]', timeout=TIMEOUT_MS)
    tab.ready("heatmap")
    assert 0 < int(heatmap.get_attribute("data-columns")) < len(STEPS)
    tab.frame.locator('[data-control="resetZoom"]').click()
    tab.frame.wait_for_selector(f'.tv-heatmap[data-columns="{len(STEPS)}"]', timeout=TIMEOUT_MS)

    # TensorBoard's dark mode reaches the tab.
    tab.page.evaluate("document.body.classList.add('dark-mode')")
    tab.frame.wait_for_selector("html.tv-dark")
    tab.screenshot("heatmap_dark")


def test_every_run_is_ticked_when_the_tab_opens(tab):
    """As TensorBoard's own dashboards: so the Findings card covers every run (beta's NaN,
    the runs' divergence) though the heatmap shows the first."""
    ticked = tab.frame.locator('[data-control="runs"] input:checked')
    assert ticked.evaluate_all("xs => xs.map(x => x.name)") == [f"runs:{run}" for run in RUNS]
    assert tab.frame.locator('select[name="heatmapRun"]').input_value() == "alpha"
    tab.ready("findings")
    assert tab.frame.locator('.tv-finding[data-kind="nonfinite"][data-run="beta"]').count() > 0
    assert tab.frame.locator('.tv-finding[data-kind="divergence"]').count() > 0


def test_clicking_a_cell_shows_the_histogram_read_frame_gives(tab, logdir):
    tab.click_cell("blocks.0.mlp", 10)
    panel = tab.panel("blocks.0.mlp")
    panel.wait_for(timeout=TIMEOUT_MS)
    assert panel.get_attribute("data-step") == "10"
    expected = _frame_row(logdir, "alpha", "blocks.0.mlp", 10)
    counts = expected["exponent_counts"]
    want = {str(int(n)): int(c) for n, c in counts.items() if math.isfinite(n) and c}
    want["zero"] = int(counts[-math.inf])
    want["nan"] = int(expected["scalar_stats", "nan_count"])
    want["+inf"] = int(expected["scalar_stats", "posinf_count"])
    want["-inf"] = int(expected["scalar_stats", "neginf_count"])
    got = tab.bars("blocks.0.mlp", "alpha")
    assert got.pop("zero") == want.pop("zero") == 25
    assert {k: v for k, v in got.items() if v} == {k: v for k, v in want.items() if v}
    assert tab.frame.locator(".tv-cell-marker").is_visible()
    tab.screenshot("histogram")


@pytest.mark.parametrize("layer", ["blocks.1.attn", "head"])
def test_format_overlay_shows_the_exact_underflow_and_overflow(tab, logdir, layer):
    tab.click_cell(layer, 20)
    # The tab opens on its headline finding, which may show this layer at another step.
    tab.frame.wait_for_selector(f'.tv-hist-panel[data-layer="{layer}"][data-step="20"]')
    fp8 = _frame_row(logdir, "alpha", layer, 20, format="float8_e4m3fn")
    zeros = int(fp8["scalar_stats", "zero_count"])
    infinities = int(fp8["scalar_stats", "posinf_count"] + fp8["scalar_stats", "neginf_count"])
    underflow = int(fp8["exponent_counts", -math.inf]) - zeros
    overflow = int(fp8["exponent_counts", math.inf]) - infinities
    assert (underflow > 0) if layer == "blocks.1.attn" else (overflow > 0)
    row = tab.panel(layer).locator(
        'tr.tv-format-stat[data-format="float8_e4m3fn"][data-run="alpha"]'
    )
    assert row.get_attribute("data-exact") == "true"
    assert int(row.get_attribute("data-underflow")) == underflow
    assert int(row.get_attribute("data-overflow")) == overflow
    text = row.inner_text()
    assert f"{underflow:,}" in text and f"{overflow:,}" in text and "exact" in text
    # A format not recorded at tracking time is labelled an estimate.
    e5m2 = tab.panel(layer).locator(
        'tr.tv-format-stat[data-format="float8_e5m2"][data-run="alpha"]'
    )
    assert e5m2.get_attribute("data-exact") == "false" and "estimated" in e5m2.inner_text()
    # Lines at the format's limits are drawn.
    overlay = tab.panel(layer).locator('.tv-format-overlay[data-format="float8_e4m3fn"] line')
    assert overlay.count() >= 2
    # "scaled": the window slides so max|x| meets the format's max: nothing overflows.
    tab.frame.locator('input[name="scaled"]').check()
    scaled = tab.panel(layer).locator('tr.tv-format-stat[data-format="float8_e4m3fn"]')
    scaled.first.wait_for()
    assert scaled.first.get_attribute("data-overflow") == "0"
    assert "estimated, scaled" in scaled.first.inner_text()
    tab.screenshot(f"formats_{layer.replace('.', '_')}")


def test_run_comparison_draws_both_runs(tab):
    tab.click_cell("blocks.0.attn", 30)
    tab.panel("blocks.0.attn").wait_for(timeout=TIMEOUT_MS)
    tab.frame.locator('input[name="runs:beta"]').check()
    tab.frame.wait_for_selector('.tv-hist-panel rect.tv-bar[data-run="beta"]', timeout=TIMEOUT_MS)
    tab.ready("lines")
    assert len(tab.bars("blocks.0.attn", "alpha")) > 4
    assert len(tab.bars("blocks.0.attn", "beta")) > 4
    loss = tab.frame.locator('.tv-line-chart[data-key="scalar:loss"] .u-legend')
    assert "alpha" in loss.inner_text() and "beta" in loss.inner_text()
    metric = tab.frame.locator('.tv-line-chart[data-key^="metric:"] .u-legend').first
    assert "alpha · blocks.0.attn" in metric.inner_text()
    assert "beta · blocks.0.attn" in metric.inner_text()
    tab.screenshot("compare_overlay")

    tab.frame.select_option('select[name="compare"]', "side")
    tab.frame.wait_for_selector(".tv-hist-panel .tv-hist-caption", timeout=TIMEOUT_MS)
    captions = tab.frame.locator(".tv-hist-panel .tv-hist-caption").all_inner_texts()
    assert [c.strip(" ·") for c in captions] == ["alpha", "beta"]
    tab.frame.wait_for_selector('.tv-line-chart[data-key="scalar:loss · beta"]')
    tab.screenshot("compare_side_by_side")


def test_clicking_the_loss_chart_moves_the_histogram_step(tab):
    tab.click_cell("embed", 4)
    tab.panel("embed").wait_for(timeout=TIMEOUT_MS)
    tab.ready("lines")
    over = tab.frame.locator('.tv-line-chart[data-key="scalar:loss"] .u-over')
    box = over.bounding_box()
    target = 30
    x = (target - STEPS[0]) / (STEPS[-1] - STEPS[0]) * box["width"]
    over.hover(position={"x": x, "y": box["height"] / 2})
    over.click(position={"x": x, "y": box["height"] / 2})
    tab.frame.wait_for_selector(
        f'.tv-hist-panel[data-layer="embed"][data-step="{target}"]', timeout=TIMEOUT_MS
    )
    assert tab.frame.locator(".tv-step-label").inner_text() == f"step {target}"
    tab.screenshot("loss_click")


def test_hostile_layer_name_is_only_text(tab):
    label = tab.label(HOSTILE)
    assert label.inner_text() == HOSTILE
    tab.click_cell(HOSTILE, 8)
    panel = tab.panel(HOSTILE)
    panel.wait_for(timeout=TIMEOUT_MS)
    assert panel.locator(".tv-hist-layer").inner_text() == HOSTILE
    row = int(label.get_attribute("data-row"))
    canvas = tab.frame.locator("canvas.tv-heatmap-canvas")
    height = canvas.bounding_box()["height"] / len(LAYERS + ("blocks", "blocks.0", "blocks.1"))
    canvas.hover(position={"x": 5, "y": (row + 0.5) * height})
    tooltip = tab.frame.locator(".tv-tooltip")
    tooltip.wait_for(state="visible")
    assert tooltip.locator(".tv-tooltip-name").inner_text() == HOSTILE
    assert "step 0" in tooltip.inner_text()
    assert tab.frame.locator("img").count() == 0
    assert tab.page.locator("img").count() == 0
    # Typing markup into the layer filter draws nothing of it either.
    tab.frame.fill('input[name="layerRegex"]', "<img src=y onerror=alert(2)>|onerror")
    tab.frame.press('input[name="layerRegex"]', "Enter")
    tab.frame.wait_for_selector('.tv-row-label[data-kind="layer"] >> nth=0')
    tab.ready("heatmap")
    assert tab.frame.locator('.tv-row-label[data-kind="layer"]').all_inner_texts() == [HOSTILE]
    assert tab.frame.locator("img").count() == 0


def test_state_survives_a_reload_and_csv_export_works(tab, tensorboard):
    tab.frame.select_option('select[name="metric"]', "zero_fraction")
    tab.ready("heatmap")
    tab.click_cell("head", 12)
    tab.panel("head").wait_for(timeout=TIMEOUT_MS)
    tab.page.reload()
    frame = tab.page.wait_for_selector("iframe", timeout=TIMEOUT_MS).content_frame()
    frame.wait_for_selector('.tv-hist-panel[data-layer="head"][data-step="12"]', timeout=TIMEOUT_MS)
    assert frame.locator('select[name="metric"]').input_value() == "zero_fraction"
    href = frame.locator('a[data-export^="Heatmap"]').get_attribute("href")
    with urllib.request.urlopen(f"{tensorboard}/data/plugin/tandv/{href}") as answer:
        lines = answer.read().decode().splitlines()
    assert lines[0].startswith("layer,") and len(lines) == 1 + len(LAYERS)


def test_heatmap_of_800_by_1000_cells_draws_fast(tab, tmp_path):
    shipped = REPO / "tandv_tb" / "static" / "index.js"
    assert "hoverP95Ms" not in shipped.read_text(), "the benchmark ships in the user's bundle"
    bench = heatmap_bench_script(tmp_path)
    timing = tab.frame.evaluate(f"{bench}\n;tandvBench.benchHeatmap(800, 1000)")
    print("heatmap timing:", timing)
    assert timing["rows"] == 800 and timing["columns"] == 1000
    # Best of 5 draws and the 95th percentile of 200 hovers: robust to a busy machine.
    assert timing["drawMs"] <= 200
    assert timing["hoverP95Ms"] < 16


def test_reload_shows_new_steps_of_a_running_training(tab, logdir):
    before = tab.frame.locator(".tv-heatmap").get_attribute("data-columns")
    assert before == str(len(STEPS))
    write_logdir(logdir, runs=("alpha",), steps=(40, 42, 44))
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while time.monotonic() < deadline:
        tab.page.locator("app-header-reload .reload-button").click()
        try:
            tab.frame.wait_for_selector(
                f'.tv-heatmap[data-columns="{len(STEPS) + 3}"]', timeout=2_000
            )
            break
        except playwright_api.TimeoutError:
            continue
    else:
        pytest.fail("the new steps never appeared")
    tab.screenshot("after_reload")


def test_a_logdir_without_numerics_says_how_to_record_them(browser, tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(tmp_path / "logs" / "scalars_only")) as writer:
        writer.add_scalar("loss", 1.0, 0)
    with (
        serve(tmp_path / "logs", b'"runs"') as url,
        open_tab(browser, url, '#tandv-numerics[data-state="empty"]') as empty,
    ):
        text = empty.frame.locator(".tv-empty").inner_text()
        assert "No numerics in this logdir" in text
        assert "tandv_tb.torch.track(model" in text and "tracker.step()" in text
        empty.screenshot("empty_logdir")


@pytest.fixture(scope="module", autouse=True)
def _clean_artifacts():
    if os.environ.get("KEEP_ARTIFACTS") != "1":
        shutil.rmtree(ARTIFACTS, ignore_errors=True)
    yield
