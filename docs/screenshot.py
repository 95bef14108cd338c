"""Retake the pictures of README.md and the docs: a real ``tensorboard`` over the demo runs
(``make demo`` first), the Numerics tab in headless Chromium.

- ``docs/numerics_tab.png``: the tab as it opens: every run ticked, the view on the headline
  (the float8_e4m3fn overflow of ``torch/lr_2e-1``). Also prints how long, on the tab's
  first load (its first run), the Findings card took to be ready after the heatmap was drawn.
- ``--graph`` (``docs/graph_view.png``): the Graph view of ``torch/lr_2e-1``, the graph its
  tracker recorded, coloured by the float8_e4m3fn overflow at the run's last step, its
  last decoder block open.

    python docs/screenshot.py [--logdir demo/runs] [--graph] [--out PATH]
"""

from __future__ import annotations

import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from tests.helpers.browser import (  # noqa: E402
    CHROMIUM,
    CHROMIUM_ARGS,
    TIMEOUT_MS,
    serve,
    watch,
)

#: Chromium's console line for a 404: the histogram and line cards ask every ticked run for
#: the layer shown, and the JAX model has no ``blocks.1`` (the cards expect that answer).
NOT_FOUND = "Failed to load resource: the server responded with a status of 404 (NOT FOUND)"
GRAPH_CARD = '[data-card="graph"]'
#: Records, in the plugin's frame, when the heatmap is first drawn and when each card first
#: becomes ready (ms since the frame loaded).
TIMES = """() => {
  window.__ready = {};
  const seen = () => {
    if (!("drawn" in window.__ready) && document.querySelector(".tv-heatmap[data-draw-ms]"))
      window.__ready.drawn = performance.now();
    for (const card of document.querySelectorAll("[data-card]")) {
      const name = card.dataset.card;
      const state = card.dataset.state;
      if (!(name in window.__ready) && (state === "ready" || state === "empty")
          && !card.classList.contains("tv-loading")) window.__ready[name] = performance.now();
    }
  };
  new MutationObserver(seen).observe(document, {subtree: true, attributes: true, childList: true});
  seen();
}"""


def main(argv: list[str] | None = None) -> None:
    from playwright.sync_api import sync_playwright

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logdir", type=pathlib.Path, default=pathlib.Path("demo/runs"))
    parser.add_argument("--graph", action="store_true", help="the Graph view's picture")
    parser.add_argument("--out", type=pathlib.Path, default=None)
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = pathlib.Path("docs/graph_view.png" if args.graph else "docs/numerics_tab.png")
    with (
        serve(args.logdir.resolve(), b'"torch/lr_2e-1"', timeout=300) as url,
        sync_playwright() as playwright,
    ):
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1200})
        problems: list[str] = []
        watch(page, problems)
        page.add_init_script(f"({TIMES})()")
        page.goto(f"{url}/#tandv")
        frame = page.wait_for_selector("iframe", timeout=TIMEOUT_MS).content_frame()
        ready = '[data-card="{}"][data-state="ready"]:not(.tv-loading)'
        frame.wait_for_selector(".tv-heatmap[data-draw-ms]", timeout=120_000)
        frame.wait_for_selector(ready.format("findings"), timeout=120_000)
        times = frame.evaluate("window.__ready")
        after = times["findings"] - times["drawn"]
        print(f"first load: findings ready {after / 1000:.2f} s after the heatmap ({times})")
        frame.wait_for_selector(".tv-hist-panel", timeout=TIMEOUT_MS)
        frame.wait_for_selector(ready.format("histogram"), timeout=TIMEOUT_MS)
        frame.wait_for_selector(ready.format("heatmap"), timeout=TIMEOUT_MS)
        frame.wait_for_selector(".tv-cell-marker", state="visible", timeout=TIMEOUT_MS)
        page.mouse.move(0, 0)
        if args.graph:
            _graph_view(frame).screenshot(path=str(args.out))
        else:
            page.screenshot(path=str(args.out))
        browser.close()
        problems = [problem for problem in problems if not problem.endswith(NOT_FOUND)]
        if problems:
            raise SystemExit(f"the page reported problems: {problems}")
    (args.logdir.resolve().parent / f"tensorboard_{args.logdir.resolve().name}.log").unlink(
        missing_ok=True
    )  # the server's log, left by ``serve``
    print(f"wrote {args.out}")


def _graph_view(frame):
    """The Graph view of ``torch/lr_2e-1`` at its last step, its last block open; the card."""
    card = frame.locator(GRAPH_CARD)
    frame.select_option('select[name="metric"]', "overflow_fraction")
    frame.select_option('select[name="metricFormat"]', "float8_e4m3fn")
    frame.select_option('select[name="view"]', "graph")
    frame.select_option(f'{GRAPH_CARD} select[name="heatmapRun"]', "torch/lr_2e-1")
    frame.wait_for_selector(f"{GRAPH_CARD}[data-shown]:not([hidden])", timeout=TIMEOUT_MS)
    _graph_settled(frame)
    slider = card.locator(".tv-graph-slider")
    slider.evaluate("s => { s.value = s.max; s.dispatchEvent(new Event('input')); }")
    _graph_settled(frame)
    block = card.locator('g.tv-gnode[data-id="blocks.1#0"] rect')
    block.click()
    frame.wait_for_selector(f'{GRAPH_CARD} g.tv-gnode[data-id="blocks.1.mlp#0"]')
    _graph_settled(frame)
    frame.page.mouse.move(0, 0)
    return card


def _graph_settled(frame) -> None:
    frame.wait_for_function(
        "() => !document.querySelector('[data-card=graph]').classList.contains('tv-loading')",
        timeout=TIMEOUT_MS,
    )


if __name__ == "__main__":
    main()
