"""The tab in a real browser where storage fails at real faults: a cache folder that
cannot be written (full, read-only, immutable) is said once above the data, which is all
there; a logdir whose fsspec filesystem cannot be made (its package missing, its
constructor refusing) opens the tab, which says why."""

from __future__ import annotations

import pytest

pytest.importorskip("playwright.sync_api")

from tests.helpers.browser import open_tab  # noqa: E402
from tests.helpers.fault_filesystems import site_environment, unopenable  # noqa: E402
from tests.helpers.plugin import TensorBoardProcess  # noqa: E402
from tests.helpers.routes import query  # noqa: E402
from tests.helpers.s3_server import environment  # noqa: E402
from tests.helpers.store_faults import REASONS, broken_cache, wait_every_run  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


@pytest.mark.parametrize("fault", list(REASONS))
def test_a_cache_folder_that_cannot_be_written_is_said_once_above_the_data(
    browser, tmp_path, fault
):
    (tmp_path / "tmp").mkdir()
    with broken_cache(tmp_path, fault) as cache:
        with environment({"TMPDIR": str(tmp_path / "tmp")}):
            server = TensorBoardProcess(tmp_path / "logs", "auto", f"--tandv_cache_dir={cache}")
        try:
            wait_every_run(server)
            (notice,) = server.json(query("runs"))["notices"]
            assert REASONS[fault] in notice and "--tandv_cache_dir" in notice
            with open_tab(browser, f"http://127.0.0.1:{server.port}") as tab:
                tab.ready("heatmap")
                said = tab.frame.locator(".tv-notice")
                assert said.count() == 1 and said.inner_text() == notice
                assert tab.frame.locator('[data-control="runs"] .tv-check').count() == 4
                tab.screenshot(f"storage_fault_{fault}")
        finally:
            server.close()


@pytest.mark.page_errors(
    "a logdir that cannot be opened: the plugin answers 503, which the tab explains",
    r"status of 503",
    r"^HTTP 503: ",
)
@pytest.mark.parametrize(("url", "named"), unopenable())
def test_a_logdir_whose_filesystem_cannot_be_made_is_said_in_the_tab(browser, tmp_path, url, named):
    with environment(site_environment()):
        server = TensorBoardProcess(url, "false", log_folder=tmp_path)
    try:
        server.wait(lambda: server.json("/data/plugins_listing")["tandv"]["enabled"], "the tab")
        url_of_tab = f"http://127.0.0.1:{server.port}"
        with open_tab(browser, url_of_tab, ready='#tandv-numerics[data-state="error"]') as tab:
            assert tab.frame.locator("#tandv-numerics").get_attribute("data-storage") == "failed"
            text = tab.frame.locator(".tv-empty").inner_text()
            assert "The logdir's storage could not be read." in text
            assert f"cannot read {url}: " in text and named in text
    finally:
        server.close()
