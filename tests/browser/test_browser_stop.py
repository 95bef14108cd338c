"""A training stopped by ``on_nonfinite="raise"`` says so where a user looks: the Findings
card's headline in real headless Chromium against a real ``tensorboard``, and the
``tandv-tb findings`` command line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("playwright.sync_api")
torch = pytest.importorskip("torch")

from tests.helpers.browser import TIMEOUT_MS, serve  # noqa: E402
from tests.helpers.findings_cli import cli  # noqa: E402

NAN_STEP = 5
RUN = "stopped"
STOPPED = "training was stopped there"

pytestmark = pytest.mark.timeout(180)


def train(logdir: Path) -> None:
    """SGD whose ``hidden`` layer's output turns infinite at ``NAN_STEP``, stopped there."""
    from tandv_tb import NonFiniteError
    from tandv_tb.torch import track

    torch.manual_seed(0)
    model = torch.nn.Sequential()
    model.add_module("embed", torch.nn.Linear(8, 16))
    model.add_module("hidden", torch.nn.Linear(16, 16))
    model.add_module("head", torch.nn.Linear(16, 1))
    factor = torch.ones(())
    model.hidden.register_forward_hook(lambda m, args, out: out * factor)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    tracker = track(model, logdir=str(logdir), optimizer=optimizer, on_nonfinite="raise")
    with tracker, pytest.raises(NonFiniteError):
        for step in range(NAN_STEP + 5):
            factor.fill_(float("inf") if step == NAN_STEP else 1.0)
            model(torch.randn(4, 8)).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
            tracker.step()


@pytest.fixture(scope="module")
def logdir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("stop_logdir")
    train(root / RUN)
    return root


@pytest.fixture(scope="module")
def tensorboard(logdir: Path) -> Iterator[str]:
    with serve(logdir, f'"{RUN}"'.encode()) as url:
        yield url


def test_the_headline_says_training_was_stopped(tab, tensorboard):
    tab.frame.wait_for_selector(
        '[data-card="findings"][data-state="ready"]:not(.tv-loading)', timeout=TIMEOUT_MS
    )
    headline = tab.frame.locator(f'[data-card="findings"] .tv-headline[data-run="{RUN}"]')
    assert headline.get_attribute("data-kind") == "nonfinite"
    assert headline.get_attribute("data-step") == str(NAN_STEP)
    text = headline.inner_text()
    assert STOPPED in text and "'hidden'" in text and f"step {NAN_STEP}" in text


def test_the_command_line_says_training_was_stopped(logdir):
    done = cli("findings", str(logdir))
    assert done.returncode == 1, done.stderr  # an error: the first NaN
    assert STOPPED in done.stdout and "'hidden'" in done.stdout
