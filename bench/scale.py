"""Benchmark of a wide model and a long run (not a test).

1. **10,000 tags**: a logdir of 2,500 layers x 4 tensor types (``--steps`` steps each) is
   served by a real ``tensorboard`` process; printed: seconds until the plugin lists the
   run with all its layers, the ``layers`` route and a cold and a warm ``heatmap`` of one
   tensor type. The same for a baseline logdir of a tenth of the layers (1,000 tags) written
   and measured in the same run, with the ratios (10x the tags: a ratio near 10 is linear).
2. **The tab in Chromium**: seconds from opening TensorBoard's Numerics tab to the first
   usable heatmap, and the frame's element count, for both logdirs.
3. **Writer soak**: a ``NumericsWriter`` records one tensor for ``--soak-steps`` steps;
   every tenth of the way the process's RSS and the event file's bytes per step are
   printed (flat memory and a constant bytes per step mean no leak and linear growth).

Usage: ``python bench/scale.py [--steps 10] [--soak-steps 100000] [--skip-browser]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.browser_helpers import (  # noqa: E402
    CHROMIUM,
    CHROMIUM_ARGS,
    fetch,
    open_tab,
    serve,
    write_wide_logdir,
)

RUN = "wide"
SLOW_MS = 300_000


def _timed(url: str, route: str) -> tuple[float, bytes]:
    started = time.perf_counter()
    body, _ = fetch(url, route, timeout=600)
    return time.perf_counter() - started, body


def _wait_listed(url: str, layers: int, started: float) -> float:
    """Seconds from ``started`` until ``runs`` lists the run with all ``layers``."""
    while True:
        try:
            runs = json.loads(fetch(url, "runs")[0])["runs"]
            if any(r["run"] == RUN and r["layer_count"] >= layers for r in runs):
                return time.perf_counter() - started
        except OSError:
            pass
        time.sleep(0.05)


def measure_plugin(root: Path, layers: int, browser) -> dict[str, float]:
    """Route timings (and the tab's, when ``browser`` is given) over ``root``."""
    started = time.perf_counter()
    figures: dict[str, float] = {}
    with serve(root, b"runs", timeout=600) as url:
        figures["listed_s"] = _wait_listed(url, layers, started)
        query = f"run={RUN}&tensor_type=Activation"
        figures["layers_s"], body = _timed(url, f"layers?{query}")
        assert len(json.loads(body)["layers"]) == layers
        heatmap = f"heatmap?{query}&metric=log2_rm2&columns=1000"
        figures["heatmap_cold_s"], body = _timed(url, heatmap)
        figures["heatmap_bytes"] = len(body)
        figures["heatmap_warm_s"] = min(_timed(url, heatmap)[0] for _ in range(5))
        gradient = f"heatmap?run={RUN}&tensor_type=Gradient&metric=log2_max_abs&columns=1000"
        figures["heatmap_other_type_s"] = _timed(url, gradient)[0]
        if browser is not None:
            figures.update(measure_tab(browser, url))
    return figures


def measure_tab(browser, url: str) -> dict[str, float]:
    """Seconds from opening the tab until its heatmap is drawn; its element count."""
    started = time.perf_counter()
    with open_tab(browser, url, timeout_ms=SLOW_MS) as tab:
        tab.ready("heatmap", SLOW_MS)
        elapsed = time.perf_counter() - started
        heatmap = tab.frame.locator(".tv-heatmap")
        return {
            "tab_first_render_s": elapsed,
            "tab_elements": tab.dom_size(),
            "tab_rows": int(heatmap.get_attribute("data-rows")),
            "tab_draw_ms": float(heatmap.get_attribute("data-draw-ms")),
        }


def _rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def soak(root: Path, steps: int, numel: int = 1024) -> None:
    """Record one tensor for ``steps`` steps; print RSS and bytes per step as it goes."""
    from tandv_tb.writer import NumericsWriter

    values = np.random.default_rng(0).standard_normal(numel).astype(np.float32)
    every = max(1, steps // 10)
    print(f"\nwriter soak: {steps:,} steps of one {numel}-value float32 tensor")
    print(f"{'step':>8} {'RSS MiB':>9} {'file bytes':>12} {'bytes/step':>11} {'s/10k steps':>12}")
    with NumericsWriter(str(root), formats=("float8_e4m3fn",)) as writer:
        writer.add_numerics("layer", values, 0)  # compile and warm up before the first RSS
        first_rss = None
        last = time.perf_counter()
        for step in range(1, steps + 1):
            writer.add_numerics("layer", values * np.float32(1 + step % 7), step)
            if step % every == 0:
                writer.flush()
                size = sum(f.stat().st_size for f in root.iterdir())
                rss = _rss_mib()
                first_rss = first_rss or rss
                now = time.perf_counter()
                rate = (now - last) / every * 10_000
                last = now
                print(f"{step:>8} {rss:>9.1f} {size:>12,} {size / step:>11.1f} {rate:>12.2f}")
    print(f"RSS growth from the first report to the last: {rss - first_rss:+.1f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10, help="steps per tag (default 10)")
    parser.add_argument("--soak-steps", type=int, default=100_000)
    parser.add_argument("--skip-browser", action="store_true")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    with tempfile.TemporaryDirectory(prefix="tandv_scale_") as work:
        work = Path(work)
        browser = playwright = None
        if not args.skip_browser and Path(CHROMIUM).exists():
            from playwright.sync_api import sync_playwright

            playwright = sync_playwright().start()
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        results = {}
        try:
            for label, blocks in (("baseline 1,000 tags", 125 // 10 + 1), ("10,000 tags", 125)):
                root = work / label.split()[0]
                started = time.perf_counter()
                layers = len(write_wide_logdir(root, blocks=blocks, steps=args.steps, run=RUN))
                written = time.perf_counter() - started
                print(
                    f"\n{label}: {layers} layers x 4 types x {args.steps} steps ({written:.1f} s)"
                )
                results[label] = measure_plugin(root, layers, browser)
                for key, value in results[label].items():
                    print(f"  {key:>22}: {value:,.3f}")
        finally:
            if browser is not None:
                browser.close()
                playwright.stop()
        base, wide = results.values()
        print("\nratio 10,000 tags / baseline (tags ratio is about 9.6):")
        for key in wide:
            if base[key]:
                print(f"  {key:>22}: {wide[key] / base[key]:.2f}")
        soak(work / "soak", args.soak_steps)
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
