"""Helpers for the browser tests: a real ``tensorboard`` process over a logdir, Debian's
Chromium through Playwright, and the Numerics tab in it (the ``browser`` fixture itself is in
``conftest.py``)."""

from __future__ import annotations

import contextlib
import importlib.metadata
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from tests.helpers import REPO

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]
ARTIFACTS = REPO / "tests" / "artifacts"
#: The longest any wait for a state of the page may take: a ceiling for a loaded machine
#: (the waits end as soon as the state is reached), never a fixed pause.
TIMEOUT_MS = 90_000
FRONTEND = REPO / "tandv_tb_frontend"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


_LAUNCHER = (
    "import sys\n"
    "from tensorboard import default, program\n"
    "from tandv_tb.plugin import NumericsLoader\n"
    "tb = program.TensorBoard(plugins=default.get_plugins() + [NumericsLoader])\n"
    "tb.configure(argv=['tensorboard', *sys.argv[1:]])\n"
    "sys.exit(tb.main())\n"
)


def tensorboard_command() -> list[str]:
    """``tensorboard`` itself when the plugin is installed (entry point), else the same
    TensorBoard program given the plugin's loader explicitly."""
    installed = any(
        ep.name == "tandv" for ep in importlib.metadata.entry_points(group="tensorboard_plugins")
    )
    if installed:
        return [sys.executable, "-m", "tensorboard.main"]
    return [sys.executable, "-c", _LAUNCHER]


@contextlib.contextmanager
def serve(logdir: Path, wait_for: bytes, timeout: float = 60) -> Iterator[str]:
    """A ``tensorboard`` process over ``logdir`` on a free port, once its plugin answers
    ``runs`` with ``wait_for`` in it; stopped afterwards."""
    port = free_port()
    log_path = logdir.parent / f"tensorboard_{logdir.name}.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [
                *tensorboard_command(),
                f"--logdir={logdir}",
                f"--port={port}",
                "--host=127.0.0.1",
                "--reload_interval=1",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    with urllib.request.urlopen(f"{url}/data/plugin/tandv/runs", timeout=2) as r:
                        if wait_for in r.read():
                            break
                except OSError:
                    pass
                if process.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    raise RuntimeError(f"tensorboard did not start:\n{log_path.read_text()}")
                time.sleep(0.25)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()


def fetch(url: str, route: str, timeout: float = 120) -> tuple[bytes, str]:
    """The body and content type of a plugin route (``route`` holds the query string)."""
    with urllib.request.urlopen(f"{url}/data/plugin/tandv/{route}", timeout=timeout) as r:
        return r.read(), r.headers.get("Content-Type", "")


class Tab:
    """TensorBoard's page on the Numerics tab and its plugin frame."""

    def __init__(self, page, frame):
        self.page = page
        self.frame = frame

    def ready(self, card: str, timeout_ms: int = TIMEOUT_MS) -> None:
        self.frame.wait_for_selector(
            f'[data-card="{card}"][data-state="ready"]:not(.tv-loading)', timeout=timeout_ms
        )

    def screenshot(self, name: str) -> None:
        ARTIFACTS.mkdir(exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)

    def label(self, layer: str):
        """The heatmap's row label of ``layer`` (only rows in view exist: the list is
        virtualised)."""
        return self.frame.locator(f'.tv-row-label[data-kind="layer"][data-key="{css(layer)}"]')

    def panel(self, layer: str, tensor_type: str = "Activation"):
        return self.frame.locator(
            f'.tv-hist-panel[data-layer="{css(layer)}"][data-tensor-type="{tensor_type}"]'
        )

    def dom_size(self) -> int:
        """How many elements the plugin's frame holds."""
        return self.frame.evaluate("document.getElementsByTagName('*').length")

    def injected(self) -> list[str]:
        """Elements that only markup in the data could have made: in the frame any
        ``<img>``, ``<i>`` or ``onerror`` handler (the tab makes none) or a script that
        mentions ``alert``; in TensorBoard's page an ``<img src=x>``, a handler or such a
        script."""
        script = """selector => [...document.querySelectorAll(selector)]
            .filter(e => e.tagName !== 'SCRIPT' || e.textContent.includes('alert'))
            .map(e => e.outerHTML.slice(0, 200))"""
        found = self.frame.evaluate(script, "img, i, script, [onerror]")
        found += self.page.evaluate(script, 'img[src="x"], script, [onerror]')
        return found


def heatmap_bench_script(folder: Path) -> str:
    """The heatmap benchmark (``src/bench.ts``), bundled by ``build.mjs --bench`` into a
    script that defines ``tandvBench.benchHeatmap``; it is kept out of the shipped bundle."""
    import pytest

    if shutil.which("node") is None:
        pytest.skip("the heatmap benchmark is bundled with Node.js, which is not installed")
    if not (FRONTEND / "node_modules" / "esbuild").exists():
        pytest.fail("the frontend's packages are missing: run `make frontend-deps`")
    out = folder / "heatmap_bench.js"
    subprocess.run(["node", "build.mjs", "--bench", str(out)], cwd=FRONTEND, check=True)
    return out.read_text()


def css(text: str) -> str:
    """``text`` escaped for a double-quoted CSS attribute value (backslash, quote and control
    characters, which a CSS string cannot hold as they are)."""
    return "".join(
        f"\\{ch}" if ch in '\\"' else f"\\{ord(ch):x} " if ord(ch) < 0x20 or ch == "\x7f" else ch
        for ch in text
    )


#: What the watched pages reported (console errors, uncaught exceptions, dialogs, answers
#: with an HTTP error) since a test last took it: the ``page_problems`` fixture
#: (tests/conftest.py) takes it after each test and fails the test if it holds anything.
#: One list for every page, because a module's page outlives its tests.
REPORTED: list[str] = []


def watch(page) -> None:
    """Record in ``REPORTED`` what ``page`` reports that no working tab should."""
    page.on(
        "console",
        lambda message: (
            REPORTED.append(f"console.{message.type}: {message.text}")
            if message.type == "error"
            else None
        ),
    )
    page.on("pageerror", lambda error: REPORTED.append(f"page error: {error}"))
    page.on(
        "dialog", lambda dialog: (REPORTED.append(f"dialog: {dialog.message}"), dialog.dismiss())
    )
    page.on(
        "response",
        lambda response: (
            REPORTED.append(f"HTTP {response.status}: {response.url}")
            if response.status >= 400
            else None
        ),
    )


def take_reported() -> list[str]:
    """What the pages reported since the last call, and an empty record."""
    taken = REPORTED[:]
    REPORTED.clear()
    return taken


@contextlib.contextmanager
def open_tab(
    browser,
    url: str,
    ready: str = '#tandv-numerics[data-state="ready"]',
    timeout_ms: int = TIMEOUT_MS,
) -> Iterator[Tab]:
    """A fresh browser context (no saved state) on TensorBoard's Numerics tab, watched
    (``watch``)."""
    context = browser.new_context(viewport={"width": 1600, "height": 1200})
    context.set_default_timeout(timeout_ms)
    page = context.new_page()
    watch(page)
    try:
        page.goto(f"{url}/#tandv")
        frame = page.wait_for_selector("iframe", timeout=timeout_ms).content_frame()
        frame.wait_for_selector(ready, timeout=timeout_ms)
        yield Tab(page, frame)
    finally:
        context.close()


def reopen(session: Tab) -> Tab:
    """The Numerics tab of ``session`` afresh: saved state cleared, the plugin's frame
    reloaded, the heatmap drawn."""
    page = session.page
    page.evaluate("document.body.classList.remove('dark-mode')")
    frame = page.wait_for_selector("iframe", timeout=TIMEOUT_MS).content_frame()
    frame.evaluate("localStorage.clear()")
    frame.goto(frame.url.split("#")[0])
    frame.wait_for_selector('#tandv-numerics[data-state="ready"]', timeout=TIMEOUT_MS)
    opened = Tab(page, frame)
    opened.ready("heatmap")
    return opened


#: Tensor types of the wide logdir (2,500 layers x 4 types: 10,000 numerics tags).
WIDE_TYPES = ("Activation", "Gradient", "Weight", "Weight_Gradient")


def wide_layer_names(blocks: int = 125) -> list[str]:
    """``blocks`` x 20 layer names in model order: ``blocks.<b>.{attn,mlp}.linear<i>``."""
    return [
        f"blocks.{b}.{part}.linear{i}"
        for b in range(blocks)
        for part in ("attn", "mlp")
        for i in range(10)
    ]


def write_wide_logdir(
    root: Path, blocks: int = 125, steps: int = 3, run: str = "wide"
) -> list[str]:
    """One run of ``blocks * 20`` layers x ``WIDE_TYPES`` x ``steps`` steps (real records of
    small normal tensors whose scale drifts with depth and step); returns the layer names."""
    import numpy as np

    from tandv_tb import stats
    from tandv_tb.writer import NumericsWriter

    rng = np.random.default_rng(0)
    base = rng.standard_normal(256).astype(np.float32)
    records = {
        scale: stats.tensor_stats(base * np.float32(2.0**scale)).to_record()
        for scale in range(-24, 13)
    }
    names = wide_layer_names(blocks)
    with NumericsWriter(str(root / run)) as writer:
        for step in range(steps):
            for t, tensor_type in enumerate(WIDE_TYPES):
                for order, name in enumerate(names):
                    scale = max(-24, min(12, (order // 20) % 20 - 12 - 3 * t + step))
                    writer.add_record(name, records[scale], step, tensor_type, "Linear", order)
    return names
