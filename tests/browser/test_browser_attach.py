"""The Numerics tab over a real PyTorch run with ``attach`` and ``track_inputs=True``: the new
tensor types in the menu in dashboard order, an attached tensor in the heatmap where it ran.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("playwright.sync_api")

import torch  # noqa: E402
from torch import nn  # noqa: E402

from tandv_tb.torch import attach, track  # noqa: E402
from tests.helpers.browser import TIMEOUT_MS, open_tab, serve  # noqa: E402

pytestmark = pytest.mark.timeout(180)
HOSTILE = "<img src=x onerror=alert(1)>"


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        h = attach(torch.tanh(self.fc1(x)), "scaled") * 2.0
        attach(h, HOSTILE)
        return self.fc2(h)


@pytest.fixture(scope="module")
def tensorboard(tmp_path_factory) -> Iterator[str]:
    logdir: Path = tmp_path_factory.mktemp("attach_logdir")
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters())
    with track(model, logdir=str(logdir / "run"), optimizer=optimizer, track_inputs=True) as t:
        for _ in range(3):
            optimizer.zero_grad()
            model(torch.randn(32, 8)).square().mean().backward()
            optimizer.step()
            t.step()
    with serve(logdir, b'"run"') as url:
        yield url


def row_labels(frame) -> list[str]:
    labels = frame.locator('.tv-row-label[data-kind="layer"]')
    pairs = labels.evaluate_all("ls => ls.map(l => [Number(l.dataset.row), l.dataset.key])")
    return [key for _, key in sorted(pairs)]


def test_menu_lists_the_new_types_in_order_and_heatmap_places_attached_tensors(
    browser, tensorboard
):
    with open_tab(browser, tensorboard) as tab:
        tab.ready("heatmap")
        options = tab.frame.locator('select[name="tensorType"] option')
        assert options.evaluate_all("os => os.map(o => o.value)") == [
            "Activation",
            "Gradient",
            "Input",
            "Input_Gradient",
            "Weight",
            "Weight_Gradient",
            "Optimiser_State.exp_avg",
            "Optimiser_State.exp_avg_sq",
        ]
        # The attached tensors sit where they ran: after fc1, before fc2 and the root.
        assert row_labels(tab.frame) == ["fc1", "scaled", HOSTILE, "fc2", "Net"]
        assert tab.label(HOSTILE).inner_text().strip() == HOSTILE  # shown as text
        assert tab.injected() == []
        tab.screenshot("attach_heatmap")

        tab.frame.select_option('select[name="tensorType"]', "Input_Gradient")
        tab.frame.wait_for_selector(
            '.tv-row-label[data-key="fc1"]', state="detached", timeout=TIMEOUT_MS
        )
        tab.ready("heatmap")
        # The batch needs no gradient: only fc2's input and the root's (none) have one.
        assert row_labels(tab.frame) == ["fc2"]
