"""The tab in a real browser where logs live elsewhere or in numbers: storage that cannot
be reached is said in the tab (with what to check), and a sweep's runs are chosen by a
regular expression, as TensorBoard's own run selector chooses them."""

from __future__ import annotations

import pytest

pytest.importorskip("playwright.sync_api")

from tests.helpers.browser import open_tab  # noqa: E402
from tests.helpers.plugin import TensorBoardProcess  # noqa: E402
from tests.helpers.s3_server import environment, unreachable_endpoint  # noqa: E402
from tests.helpers.store_runs import ROUTES, write_run  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


@pytest.mark.page_errors(
    "storage that cannot be reached: the plugin answers 503, which the tab explains",
    r"status of 503",
    r"^HTTP 503: ",
)
def test_unreachable_storage_is_said_in_the_tab(browser, tmp_path):
    dead = unreachable_endpoint()
    keys = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_DEFAULT_REGION": "x"}
    with environment({**keys, "AWS_ENDPOINT_URL": dead, "S3_ENDPOINT": dead}):
        server = TensorBoardProcess("s3://away/logs", "auto", log_folder=tmp_path)
    try:
        server.wait(
            lambda: server.json("/data/plugins_listing")["tandv"]["enabled"],
            "the tab to be active (to say why there is nothing)",
        )
        url = f"http://127.0.0.1:{server.port}"
        with open_tab(browser, url, ready='#tandv-numerics[data-state="error"]') as tab:
            root = tab.frame.locator("#tandv-numerics")
            assert root.get_attribute("data-storage") == "unreachable"
            text = tab.frame.locator(".tv-empty").inner_text()
            assert "The logdir's storage could not be read." in text
            assert "cannot read s3://away/logs: the storage cannot be reached" in text
            assert "AWS_ENDPOINT_URL" in text
    finally:
        server.close()


RUNS = [f"lr_{lr}/seed_{seed}" for lr in ("1e-3", "1e-2", "1e-1") for seed in range(4)]


def test_runs_are_chosen_by_regex(browser, tmp_path):
    for run in RUNS:
        write_run(tmp_path / "logs" / run, range(3))
    server = TensorBoardProcess(tmp_path / "logs", "auto")
    try:
        server.wait(lambda: len(server.json(ROUTES + "runs")["runs"]) == len(RUNS), "the runs")
        url = f"http://127.0.0.1:{server.port}"
        with open_tab(browser, url) as tab:
            tab.ready("heatmap")
            frame = tab.frame
            listed = frame.locator('[data-control="runs"] .tv-check')
            assert listed.count() == len(RUNS)
            frame.fill('input[name="runRegex"]', r"lr_1e-2/seed_[12]$")
            frame.press('input[name="runRegex"]', "Enter")
            frame.wait_for_function(
                """() => document.querySelectorAll('[data-control="runs"] .tv-check').length == 2"""
            )
            labels = [listed.nth(i).get_attribute("data-value") for i in range(listed.count())]
            assert labels == ["lr_1e-2/seed_1", "lr_1e-2/seed_2"]
            ticked = frame.locator('[data-control="runs"] input:checked')
            assert ticked.count() == 2  # the runs it lists are the runs shown
            assert "2 of 12 runs match" in frame.locator('[data-control="runNote"]').inner_text()
            tab.ready("heatmap")
            assert frame.locator('[data-control="heatmapRun"], .tv-heatmap').count() >= 1
            frame.fill('input[name="runRegex"]', "(")
            frame.press('input[name="runRegex"]', "Enter")
            frame.wait_for_function(
                """() => document.querySelector('[data-control="runNote"]')
                     .textContent.includes('not a valid regular expression')"""
            )
            assert listed.count() == len(RUNS)
    finally:
        server.close()
