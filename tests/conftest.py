"""Fixtures shared by the test modules."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.browser import CHROMIUM, CHROMIUM_ARGS


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
