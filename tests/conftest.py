"""Fixtures shared by the test modules."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.browser import CHROMIUM, CHROMIUM_ARGS, take_reported


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium, headless, through Playwright (skips without them)."""
    playwright_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip("needs Debian's chromium")
    with playwright_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(autouse=True)
def page_problems(request) -> Iterator[None]:
    """A test that drives Chromium fails at teardown if a page logged a console error, threw,
    opened a dialog or got an answer with an HTTP error since the test before (a module's
    page opens before its first test). A test that causes such errors on purpose says so,
    ``@pytest.mark.page_errors(reason, *patterns)``: what a pattern finds (``re.search``)
    is expected there, anything else still fails it."""
    yield
    if "browser" not in request.fixturenames:
        return
    reported = take_reported()
    expected: list[str] = []
    marker = request.node.get_closest_marker("page_errors")
    if marker is not None:
        reason, *expected = marker.args
        assert reason and expected, "page_errors takes a reason, then the expected patterns"
    unexpected = [p for p in reported if not any(re.search(e, p) for e in expected)]
    assert unexpected == [], f"the page reported problems: {unexpected}"


def pytest_configure(config):
    """Every store the plugin builds during the tests goes to a folder of this session
    (``XDG_CACHE_HOME``, inherited by the ``tensorboard`` processes the tests start).
    Without a GPU, the Triton kernels run in Triton's interpreter on CPU tensors
    (``TRITON_INTERPRET=1``, read when a kernel is defined, so set before any is)."""
    import importlib.util
    import os
    import tempfile

    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="tandv_tb-test-cache-")
    if importlib.util.find_spec("torch") is None:  # a JAX-only environment (make compat)
        return
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(items):
    """Every test that uses Chromium carries the ``browser`` marker, wherever it lives."""
    for item in items:
        if "browser" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.browser)
