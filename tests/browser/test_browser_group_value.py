"""A collapsed group's value is the same in the heatmap and in the graph, in real Chromium
against a real ``tensorboard``: two runs written by ``NumericsWriter``, ``lower`` twice
``base`` in every layer but one, ``blocks.0.mlp``, where it is 2**-10 of it. Subtracted
(``lower − base``, log2 of the largest magnitude), the group ``blocks`` holds differences of
+1 and one of -10: both views show -10, the one farthest from zero, where the largest (+1)
would hide it. Not subtracted, both show the group's largest value."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

pytest.importorskip("playwright.sync_api")

from tandv_tb.writer import NumericsWriter  # noqa: E402
from tests.helpers.browser import Tab, serve  # noqa: E402

LAYERS = ("embed", "blocks.0.attn", "blocks.0.mlp", "blocks.1.attn", "blocks.1.mlp", "head")
LOW = "blocks.0.mlp"
STEPS = (0, 1, 2)
GRAPH = '[data-card="graph"]'

pytestmark = pytest.mark.timeout(240)


def _scale(run: str, layer: str) -> float:
    """How much larger than ``base`` the values of ``layer`` are in ``run``."""
    if run == "base":
        return 1.0
    return 2.0**-10 if layer == LOW else 2.0


@pytest.fixture(scope="module")
def tensorboard(tmp_path_factory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("group_value_logdir")
    values = np.random.default_rng(5).standard_normal(1024).astype(np.float32)
    for run in ("base", "lower"):
        with NumericsWriter(str(root / run)) as writer:
            for step in STEPS:
                for layer in LAYERS:
                    writer.add_numerics(layer, values * np.float32(_scale(run, layer)), step)
    with serve(root, b'"lower"') as url:
        yield url


def _heatmap_group(tab: Tab, prefix: str) -> tuple[float, str]:
    """The exact value and the tooltip text of the heatmap's row of the collapsed group
    ``prefix`` in its last column (hovered)."""
    label = tab.frame.locator(f'.tv-row-label[data-kind="group"][data-key="{prefix}"]')
    label.wait_for()
    assert "▸" in label.inner_text()  # collapsed
    heatmap = tab.frame.locator(".tv-heatmap")
    rows = int(heatmap.get_attribute("data-rows"))
    columns = int(heatmap.get_attribute("data-columns"))
    assert columns == len(STEPS)
    row = int(label.get_attribute("data-row"))
    plot = tab.frame.locator(".tv-heatmap-plot")
    box = plot.bounding_box()
    x = (columns - 0.5) * box["width"] / columns
    y = (row + 0.5) * box["height"] / rows
    plot.hover(position={"x": x, "y": y})
    tooltip = tab.frame.locator(".tv-tooltip")
    tooltip.wait_for(state="visible")
    assert tooltip.get_attribute("data-step") == str(STEPS[-1])
    return float(tooltip.get_attribute("data-value")), tooltip.inner_text()


def _graph_box(tab: Tab, node: str) -> float:
    """The value of the graph's box ``node`` at the last step (the graph of layer names)."""
    tab.frame.select_option('select[name="view"]', "graph")
    tab.frame.wait_for_selector(f"{GRAPH}:not([hidden])[data-step='{STEPS[-1]}']")
    tab.ready("graph")
    box = tab.frame.locator(f'{GRAPH} g.tv-gnode[data-id="{node}"]')
    return float(box.get_attribute("data-value"))


def _heatmap_view(tab: Tab) -> None:
    tab.frame.select_option('select[name="view"]', "heatmap")
    tab.ready("heatmap")


def test_a_collapsed_group_shows_one_value_in_the_heatmap_and_the_graph(tab):
    tab.frame.select_option('select[name="metric"]', "log2_max_abs")
    tab.frame.select_option('select[name="heatmapRun"]', "lower")
    tab.frame.select_option('select[name="groups"]', "collapsed")
    tab.ready("heatmap")

    # Not subtracted: the group's largest value (each of lower's layers but one is 2x base's).
    largest, text = _heatmap_group(tab, "blocks")
    assert "blocks.* (max of 4 layers)" in text
    assert _graph_box(tab, "blocks") == largest

    # lower − base: +1 in three of the group's layers, -10 in blocks.0.mlp.
    _heatmap_view(tab)
    tab.frame.select_option('select[name="minusRun"]', "base")
    tab.frame.wait_for_selector(".tv-legend-title:has-text('lower − base')")
    tab.ready("heatmap")
    difference, text = _heatmap_group(tab, "blocks")
    assert "blocks.* (farthest from 0 of 4 layers)" in text
    assert difference == pytest.approx(-10.0)
    assert _graph_box(tab, "blocks") == difference
