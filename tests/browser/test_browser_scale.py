"""The Numerics tab over 10,000 numerics tags (2,500 layers x 4 tensor types, 3 steps each)
in Chromium against a real ``tensorboard`` process: it renders an overview of module groups,
keeps the DOM small (only the rows in view exist), and a layer deep in the model is reached
by the layer filter and by scrolling, and its histogram shown."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.browser import TIMEOUT_MS, open_tab, serve, write_wide_logdir

pytestmark = pytest.mark.timeout(300)

#: The frame's element count stays far below one element per layer.
MAX_ELEMENTS = 1500
SLOW_MS = 120_000
HEATMAP = ".tv-heatmap"


@pytest.fixture(scope="module")
def wide(tmp_path_factory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("wide_logdir")
    return root, write_wide_logdir(root, steps=3)


@pytest.fixture(scope="module")
def tensorboard(wide) -> Iterator[str]:
    with serve(wide[0], b'"wide"', timeout=180) as url:
        yield url


def _rows(tab) -> int:
    return int(tab.frame.locator(HEATMAP).get_attribute("data-rows"))


def _open_layer(tab, layer: str) -> None:
    """Click ``layer``'s label and wait for its histogram."""
    tab.label(layer).click()
    panel = tab.panel(layer)
    panel.wait_for(timeout=SLOW_MS)
    assert panel.locator(".tv-hist-layer").inner_text() == layer
    assert panel.locator("rect.tv-bar").count() > 3


def test_10000_tags_open_on_an_overview_with_a_small_dom(browser, tensorboard, wide):
    names = wide[1]
    assert len(names) == 2500
    with open_tab(browser, tensorboard, timeout_ms=SLOW_MS) as tab:
        tab.ready("heatmap", SLOW_MS)
        legend = tab.frame.locator(".tv-legend-title").inner_text()
        assert "2500 layers" in legend
        # The overview: one row per block (the max over its 20 layers), each one opens.
        assert 100 < _rows(tab) <= 128
        block = tab.frame.locator('.tv-row-label[data-kind="group"][data-key="blocks.7"]')
        assert "(20)" in block.inner_text()
        assert tab.dom_size() < MAX_ELEMENTS
        tab.screenshot("scale_overview")

        # Every group open: 2,876 rows, of which only those in view are in the DOM.
        tab.frame.select_option('select[name="groups"]', "expanded")
        tab.frame.wait_for_function(
            f"() => Number(document.querySelector('{HEATMAP}').dataset.rows) > 2500",
            timeout=TIMEOUT_MS,
        )
        labels = tab.frame.locator(".tv-row-label").count()
        assert 0 < labels < 150
        assert tab.dom_size() < MAX_ELEMENTS

        # Scrolling to the end reaches the last layer.
        last = names[-1]
        assert tab.label(last).count() == 0
        tab.frame.locator(".tv-heatmap-scroll").evaluate("s => { s.scrollTop = s.scrollHeight; }")
        tab.label(last).wait_for(timeout=TIMEOUT_MS)
        assert tab.label(names[0]).count() == 0
        # The cells scrolled with the names: hovering beside the last label names that layer.
        row = tab.label(last).bounding_box()
        canvas = tab.frame.locator("canvas.tv-heatmap-canvas").bounding_box()
        tab.page.mouse.move(canvas["x"] + 5, row["y"] + row["height"] / 2)
        tooltip = tab.frame.locator(".tv-tooltip-name")
        tooltip.wait_for(state="visible", timeout=TIMEOUT_MS)
        assert tooltip.inner_text() == last
        _open_layer(tab, last)
        assert tab.dom_size() < MAX_ELEMENTS
        tab.screenshot("scale_scrolled")

        # The layer filter finds one layer deep in the model.
        deep = names[2017]
        tab.frame.fill('input[name="layerRegex"]', f"^{deep.replace('.', '[.]')}$")
        tab.frame.press('input[name="layerRegex"]', "Enter")
        tab.frame.wait_for_selector(f'{HEATMAP}[data-rows="1"]', timeout=SLOW_MS)
        _open_layer(tab, deep)
