"""The Numerics tab's Graph view in real Chromium against a real ``tensorboard``: a logdir
written by ``NumericsWriter`` (the float8_e4m3fn overflow of ``blocks.1.mlp.c_fc`` grows
with the step) with a recorded graph, a run without one, and a run whose module names hold
HTML.

The view opens on the model's calls, a click opens a block (the breadcrumb goes back),
each box is coloured by the chosen format's overflow at the chosen step (the value the
heatmap route gives, the worst of a module's layers), a click on a layer opens its
histogram, the run's headline is outlined, ``minus`` colours by a difference, the view's
state comes back from the URL, and a run without a graph shows the module tree of its
layer names.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

playwright_api = pytest.importorskip("playwright.sync_api")

from tandv_tb.writer import NumericsWriter  # noqa: E402
from tests.helpers.browser import Tab, fetch, serve  # noqa: E402
from tests.helpers.model_graphs import HOSTILE, gpt_graph, gpt_layers, residual_graph  # noqa: E402

STEPS = tuple(range(0, 20, 2))
HOT = "blocks.1.mlp.c_fc"  # its overflow grows with the step
FORMAT = "float8_e4m3fn"
CARD = '[data-card="graph"]'

pytestmark = pytest.mark.timeout(180)


def _values(base: np.ndarray, layer: str, index: int, step: int, scale: float) -> np.ndarray:
    exponent = 2 + index % 3 + (step / 2 if layer == HOT else 0)
    return base * np.float32(scale * 2.0**exponent)


def write_logdir(root: Path) -> None:
    """``torch`` (a graph), ``other`` (the same, its values a quarter: for ``minus``),
    ``plain`` (no graph), ``hostile`` (the residual graph, a module named in HTML)."""
    base = np.random.default_rng(0).standard_normal(2048).astype(np.float32)
    layers = gpt_layers(2)
    runs = {"torch": (layers, gpt_graph(2), 1.0), "other": (layers, gpt_graph(2), 0.25)}
    runs["plain"] = (layers, None, 1.0)
    hostile = residual_graph()
    runs["hostile"] = (list(dict.fromkeys(n["layer"] for n in hostile["nodes"])), hostile, 1.0)
    for run, (names, graph, scale) in runs.items():
        with NumericsWriter(str(root / run), formats=(FORMAT,)) as writer:
            for step in STEPS:
                for i, layer in enumerate(names):
                    writer.add_numerics(layer, _values(base, layer, i, step, scale), step)
            if graph is not None:
                writer.add_graph(graph)


@pytest.fixture(scope="module")
def tensorboard(tmp_path_factory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("graph_logdir")
    write_logdir(root)
    with serve(root, b'"torch"') as url:
        yield url


def _card(tab: Tab):
    return tab.frame.locator(CARD)


def _shown(tab: Tab) -> int:
    return int(_card(tab).get_attribute("data-shown") or 0)


def _open_graph(tab: Tab, run: str, metric: str = "overflow_fraction") -> None:
    """The Graph view of ``run``, coloured by ``metric`` (of float8_e4m3fn)."""
    tab.frame.select_option('select[name="metric"]', metric)
    if metric == "overflow_fraction":
        tab.frame.select_option('select[name="metricFormat"]', FORMAT)
    tab.frame.select_option('select[name="view"]', "graph")
    tab.frame.select_option(f'{CARD} select[name="heatmapRun"]', run)
    tab.frame.wait_for_selector(f"{CARD}[data-shown]:not([hidden])")
    _settled(tab)


def _settled(tab: Tab) -> None:
    tab.ready("graph")
    tab.frame.wait_for_function(
        "() => !document.querySelector('[data-card=graph]').classList.contains('tv-loading')"
    )


def _boxes(tab: Tab) -> dict[str, dict]:
    """The drawn boxes by id: their text, value, fill and whether outlined."""
    return dict(
        _card(tab)
        .locator("g.tv-gnode")
        .evaluate_all(
            """gs => gs.map(g => [g.dataset.id, {
                text: [...g.querySelectorAll('text')].map(t => t.textContent),
                value: g.dataset.value, fill: g.dataset.fill,
                headline: g.classList.contains('tv-gnode-headline')}])"""
        )
    )


def _click_box(tab: Tab, node_id: str) -> None:
    before = _shown(tab)
    _card(tab).locator(f'g.tv-gnode[data-id="{node_id}"] rect').click()
    tab.frame.wait_for_function(
        f"() => +document.querySelector('[data-card=graph]').dataset.shown > {before}"
    )
    _settled(tab)


def _set_step(tab: Tab, step: int) -> None:
    slider = _card(tab).locator(".tv-graph-slider")
    slider.evaluate(
        "(s, i) => { s.value = String(i); s.dispatchEvent(new Event('input')); }",
        STEPS.index(step),
    )
    tab.frame.wait_for_selector(f'{CARD}[data-step="{step}"]')


def _heatmap_cells(
    url: str, run: str, metric: str = "overflow_fraction", **extra
) -> tuple[list[str], list[list[float | None]]]:
    """The heatmap route's layers and cells (one column per step) of ``metric``."""
    from tests.helpers.plugin import heatmap_values

    query = "&".join(
        f"{k}={v}"
        for k, v in {
            "run": run,
            "tensor_type": "Activation",
            "metric": metric,
            "format": FORMAT,
            "columns": 10000,
            **extra,
        }.items()
    )
    body = json.loads(fetch(url, f"heatmap?{query}")[0])
    return [layer["layer"] for layer in body["layers"]], heatmap_values(body)


def test_the_view_opens_a_block_colours_by_overflow_at_a_step_and_opens_a_histogram(
    tab, tensorboard
):
    _open_graph(tab, "torch")
    card = _card(tab)
    assert card.get_attribute("data-recorded") == "true"
    top = _boxes(tab)
    assert list(top) == ["embed#0", "blocks.0#0", "blocks.1#0", "head#0"]
    assert top["blocks.1#0"]["text"] == ["▸ blocks.1", "Block · [2,16,32]"]
    crumbs = card.locator(".tv-crumb").evaluate_all("cs => cs.map(c => c.textContent)")
    assert crumbs == ["GPT"]

    # Open blocks.1: its calls between the block's inputs and outputs.
    _click_box(tab, "blocks.1#0")
    assert card.get_attribute("data-focus") == "blocks.1#0"
    inside = _boxes(tab)
    expected = ["\x00inputs", *(f"blocks.1.{part}#0" for part in ("ln_1", "attn", "ln_2", "mlp"))]
    assert list(inside) == [*expected, "\x00outputs"]
    assert card.locator(".tv-crumb").evaluate_all("cs => cs.map(c => c.textContent)") == [
        "GPT",
        "blocks.1",
    ]
    # The run's headline (the first overflow, of blocks.1.mlp.c_fc) is outlined.
    assert [i for i, box in inside.items() if box["headline"]] == ["blocks.1.mlp#0"]

    # Colours follow the step: mlp shows the worst of its layers, as the heatmap route.
    names, cells = _heatmap_cells(tensorboard, "torch")
    mlp_rows = [
        names.index(n) for n in ("blocks.1.mlp", "blocks.1.mlp.c_fc", "blocks.1.mlp.c_proj")
    ]
    fills = {}
    for step in (0, 12, 18):
        _set_step(tab, step)
        box = _boxes(tab)["blocks.1.mlp#0"]
        want = max(cells[row][STEPS.index(step)] for row in mlp_rows)
        assert float(box["value"]) == pytest.approx(want, rel=1e-6), step
        fills[step] = box["fill"]
        attn = _boxes(tab)["blocks.1.attn#0"]
        assert float(attn["value"]) == cells[names.index("blocks.1.attn")][STEPS.index(step)]
    assert float(_boxes(tab)["blocks.1.mlp#0"]["value"]) > 0.5  # step 18 overflows
    assert len(set(fills.values())) == 3, fills
    tab.screenshot("graph_block")

    # Hover tells shapes, dtypes, the extra_repr and the value.
    card.locator('g.tv-gnode[data-id="blocks.1.ln_1#0"] rect').hover()
    tooltip = card.locator(".tv-graph-tooltip")
    tooltip.wait_for()
    text = tooltip.inner_text()
    assert "in: [2, 16, 32] float32" in text and "out: [2, 16, 32] bfloat16" in text
    assert "(32,), eps=1e-05" in text and "overflow fraction (float8_e4m3fn) at step 18" in text

    # Into mlp, then a click on c_fc opens its histogram at the step shown.
    _click_box(tab, "blocks.1.mlp#0")
    _card(tab).locator(f'g.tv-gnode[data-id="{HOT}#0"] rect').click()
    panel = tab.panel(HOT)
    panel.wait_for()
    assert panel.get_attribute("data-step") == "18"

    # The breadcrumb goes back.
    before = _shown(tab)
    card.locator('.tv-crumb[data-focus="blocks.1#0"]').click()
    tab.frame.wait_for_function(
        f"() => +document.querySelector('[data-card=graph]').dataset.shown > {before}"
    )
    assert card.get_attribute("data-focus") == "blocks.1#0"


def test_the_view_state_is_kept_in_the_frames_address(tab):
    _open_graph(tab, "torch")
    _click_box(tab, "blocks.0#0")
    state = tab.frame.evaluate("new URLSearchParams(location.hash.slice(1)).get('state')")
    assert json.loads(state)["view"] == "graph"
    assert json.loads(state)["graphFocus"] == "blocks.0#0"
    address = tab.frame.url
    tab.frame.evaluate("localStorage.clear()")
    tab.frame.goto(address)
    tab.frame.wait_for_selector(f'{CARD}[data-focus="blocks.0#0"]')
    assert tab.frame.locator('[data-card="heatmap"]').get_attribute("hidden") is not None


def test_minus_run_colours_by_the_difference(tab, tensorboard):
    _open_graph(tab, "torch", metric="log2_max_abs")
    tab.frame.select_option(f'{CARD} select[name="minusRun"]', "other")
    tab.frame.wait_for_selector(f"{CARD} .tv-legend-title:has-text('torch − other')")
    _settled(tab)
    _set_step(tab, 18)
    names, cells = _heatmap_cells(tensorboard, "torch", minus_run="other", metric="log2_max_abs")
    boxes = _boxes(tab)
    assert cells[names.index("head")][STEPS.index(18)] == 2.0  # other's values are a quarter
    assert float(boxes["head#0"]["value"]) == 2.0
    assert float(boxes["blocks.1#0"]["value"]) == 2.0


def test_a_run_without_a_graph_shows_the_module_tree_of_its_layer_names(tab):
    _open_graph(tab, "plain")
    card = _card(tab)
    assert card.get_attribute("data-recorded") == "false"
    assert "No graph was recorded for plain" in card.locator(".tv-graph-note").inner_text()
    assert list(_boxes(tab)) == ["GPT", "embed", "blocks", "head"]
    _click_box(tab, "blocks")
    assert list(_boxes(tab)) == ["blocks.0", "blocks.1"]


def test_names_with_html_are_shown_as_text(tab):
    _open_graph(tab, "hostile")
    boxes = _boxes(tab)
    assert boxes[f"{HOSTILE}#0"]["text"][0] == HOSTILE
    card = _card(tab)
    card.locator(f'g.tv-gnode[data-id="{HOSTILE}#0"] rect').hover()
    assert HOSTILE in card.locator(".tv-graph-tooltip").inner_text()
    assert tab.injected() == []
