"""A Lightning run tracked by ``NumericsCallback``, seen as its user sees it: the Numerics
tab in Chromium (a real ``tensorboard``) shows the run's loss beside its numerics, at the
same steps; and a notebook's ``%load_ext tensorboard`` / ``%tensorboard --logdir ...`` in a
real IPython shell starts a TensorBoard that serves the Numerics plugin and the loss.

What a headless machine cannot check: the notebook's output cell. The ``%tensorboard``
magic draws its iframe only in a Jupyter kernel (``_CONTEXT_IPYTHON``) or Colab; in the
plain IPython shell here it only prints. The server it starts, the one that iframe shows,
is what is checked (and the same TensorBoard page is what the browser test drives).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("lightning.pytorch")

from tandv_tb.lightning import NumericsCallback  # noqa: E402
from tests.helpers.browser import TIMEOUT_MS, free_port, open_tab, serve  # noqa: E402
from tests.helpers.lightning_fit import Regression, fit  # noqa: E402

pytestmark = pytest.mark.timeout(180)

RUN = "fit/version_0"
STEPS = 6


@pytest.fixture(scope="module")
def logdir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lightning_tab")
    fit(root, Regression(), [NumericsCallback()], max_steps=STEPS)
    return root


def test_the_tab_shows_the_loss_beside_the_numerics(browser, logdir):
    with serve(logdir, RUN.encode()) as url, open_tab(browser, url) as tab:
        tab.ready("heatmap")
        heatmap = tab.frame.locator(".tv-heatmap")
        assert heatmap.get_attribute("data-columns") == str(STEPS)
        labels = tab.frame.locator('.tv-row-label[data-kind="layer"]')
        assert "net.0" in labels.evaluate_all("ls => ls.map(l => l.dataset.key)")

        # Click net.0 at step 1: its histogram and metric lines, with the loss beside them.
        rows = int(heatmap.get_attribute("data-rows"))
        row = int(tab.label("net.0").get_attribute("data-row"))
        canvas = tab.frame.locator("canvas.tv-heatmap-canvas")
        box = canvas.bounding_box()
        canvas.click(
            position={"x": 1.5 * box["width"] / STEPS, "y": (row + 0.5) * box["height"] / rows}
        )
        tab.panel("net.0").wait_for(timeout=TIMEOUT_MS)
        assert tab.panel("net.0").get_attribute("data-step") == "1"
        tab.ready("lines")
        loss = tab.frame.locator('.tv-line-chart[data-key="scalar:train_loss"]')
        assert RUN in loss.locator(".u-legend").inner_text()
        metric = tab.frame.locator('.tv-line-chart[data-key^="metric:"] .u-legend').first
        assert "net.0" in metric.inner_text()
        tab.screenshot("lightning_loss_beside_numerics")

        # The loss's steps are the numerics' steps: clicking the loss at step 4 shows the
        # histogram of step 4.
        over = loss.locator(".u-over")
        area = over.bounding_box()
        x = 4 / (STEPS - 1) * area["width"]
        over.hover(position={"x": x, "y": area["height"] / 2})
        over.click(position={"x": x, "y": area["height"] / 2})
        tab.frame.wait_for_selector(
            '.tv-hist-panel[data-layer="net.0"][data-step="4"]', timeout=TIMEOUT_MS
        )


def test_notebook_magic_serves_the_numerics_and_the_loss(logdir, monkeypatch):
    IPython = pytest.importorskip("IPython")
    from IPython.core.interactiveshell import InteractiveShell
    from tensorboard import manager

    # A notebook's kernel runs in the environment tandv_tb is installed in: its
    # ``tensorboard`` command is on the PATH.
    bin_dir = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    port = free_port()
    shell = InteractiveShell.instance()
    try:
        shell.run_line_magic("load_ext", "tensorboard")
        shell.run_line_magic("tensorboard", f"--logdir {logdir} --port {port}")
        started = [info for info in manager.get_all() if info.port == port]
        assert started, "the %tensorboard magic started no TensorBoard"
        try:
            url = f"http://localhost:{port}/data/plugin/tandv"
            with urllib.request.urlopen(f"{url}/runs", timeout=60) as answer:
                runs = json.load(answer)
            assert RUN in [run["run"] for run in runs["runs"]]
            assert RUN in runs["scalar_runs"]
            query = urllib.parse.urlencode({"run": RUN, "tag": "train_loss"})
            with urllib.request.urlopen(f"{url}/scalars?{query}", timeout=60) as answer:
                (loss,) = json.load(answer)["scalars"]
            assert loss["steps"] == list(range(STEPS))
        finally:
            for info in started:
                os.kill(info.pid, signal.SIGTERM)
    finally:
        InteractiveShell.clear_instance()
    assert IPython.get_ipython() is None
