"""Fixtures of the browser tests: one page of the module's ``tensorboard`` (a fixture each
module defines) and the Numerics tab afresh for each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.browser import Tab, open_tab, reopen


@pytest.fixture(scope="module")
def session(browser, tensorboard) -> Iterator[Tab]:
    """One TensorBoard page for the module's tests (its 6 MB app loads once)."""
    with open_tab(browser, tensorboard) as opened:
        yield opened


@pytest.fixture
def tab(session: Tab) -> Tab:
    """The Numerics tab afresh (saved state cleared, the plugin's frame reloaded)."""
    return reopen(session)
