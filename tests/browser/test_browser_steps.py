"""The step a heatmap column stands for, in a real browser: what the tooltip names is what a
click on the same spot opens, on a run whose columns each hold several recorded steps."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

pytest.importorskip("playwright.sync_api")

from tests.helpers.browser import open_tab, serve  # noqa: E402

#: Far more steps than the plot has pixels: each column holds several of them.
STEPS = 2400
LAYERS = ("encoder", "decoder")

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def tensorboard(tmp_path_factory) -> Iterator[str]:
    from tandv_tb import stats
    from tandv_tb.writer import NumericsWriter, RecordItem

    root = tmp_path_factory.mktemp("steps_logdir")
    base = np.random.default_rng(3).standard_normal(512).astype(np.float32)
    records = [stats.tensor_stats(base * np.float32(2.0**s)).to_record() for s in range(-8, 8)]
    with NumericsWriter(str(root / "long")) as writer:
        for step in range(STEPS):
            record = records[(step // 100) % len(records)]
            items = [
                RecordItem(name, record, "Activation", "Linear", order)
                for order, name in enumerate(LAYERS)
            ]
            writer.add_records(step, items)
    with serve(root, b'"long"') as url:
        yield url


def test_hovered_step_is_the_step_a_click_opens(browser, tensorboard):
    with open_tab(browser, tensorboard) as tab:
        tab.ready("heatmap")
        heatmap = tab.frame.locator(".tv-heatmap")
        rows = int(heatmap.get_attribute("data-rows"))
        columns = int(heatmap.get_attribute("data-columns"))
        assert rows == len(LAYERS) and 1 < columns < STEPS / 2
        # Open a histogram first: the cards take their final sizes (the heatmap may then
        # fetch a different number of columns) before the spot under the pointer is read.
        tab.label("decoder").click()
        tab.ready("histogram")
        tab.frame.wait_for_function(
            """steps => {
              const card = document.querySelector('[data-card="heatmap"]');
              const plot = document.querySelector(".tv-heatmap");
              const canvas = document.querySelector("canvas.tv-heatmap-canvas");
              const wanted = Math.max(50, canvas.parentElement.clientWidth);
              return card.dataset.state === "ready" && !card.classList.contains("tv-loading")
                && Number(plot.dataset.columns) === Math.min(wanted, steps);
            }""",
            arg=STEPS,
        )
        canvas = tab.frame.locator("canvas.tv-heatmap-canvas")
        tooltip = tab.frame.locator(".tv-tooltip")
        for fraction in (0.13, 0.5, 0.87):
            box = canvas.bounding_box()
            spot = {"x": box["width"] * fraction, "y": 1.5 * box["height"] / rows}
            canvas.hover(position=spot)
            tooltip.wait_for(state="visible")
            hovered = tooltip.get_attribute("data-step")
            text = tooltip.inner_text()
            assert f"step {hovered} (column of steps " in text, text
            canvas.click(position=spot)
            # The panel of the clicked layer at the hovered step: nothing else will do.
            tab.frame.wait_for_selector(
                f'.tv-hist-panel[data-layer="decoder"][data-step="{hovered}"]'
            )
            tab.ready("histogram")
            assert tab.frame.locator(".tv-step-label").inner_text() == f"step {hovered}"


def test_zooming_over_steps_asks_for_that_window_and_double_click_undoes_it(browser, tensorboard):
    """A wheel zoom over the cells becomes, once it settles, a heatmap of just the visible
    steps (a 'Steps a-b' chip); a double click goes back to every step."""
    with open_tab(browser, tensorboard) as tab:
        tab.ready("heatmap")
        canvas = tab.frame.locator("canvas.tv-heatmap-canvas")
        box = canvas.bounding_box()
        tab.page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5)
        for _ in range(4):
            tab.page.mouse.wheel(0, -400)
        chip = tab.frame.get_by_text("Steps ", exact=False).filter(has_text="✕")
        chip.wait_for(state="visible")
        first, last = (int(s) for s in chip.inner_text().split(" ")[1].rstrip("✕ ").split("–"))
        assert 0 < first < STEPS / 2 < last < STEPS - 1, (first, last)
        tab.ready("heatmap")
        columns = int(tab.frame.locator(".tv-heatmap").get_attribute("data-columns"))
        assert 1 < columns <= last - first + 1
        canvas.dblclick(position={"x": box["width"] * 0.5, "y": box["height"] * 0.5})
        chip.wait_for(state="detached")
        tab.ready("heatmap")
