"""The Findings card and the tab's first view on the demo's runs, in real headless Chromium
against a real ``tensorboard``: the card tells what ``tandv-tb findings`` prints, and the
tab opens on the headline (the float8 overflow of ``torch/lr_2e-1``) unless the address
holds the user's own view."""

from __future__ import annotations

import json
import urllib.parse

import pytest

pytest.importorskip("playwright.sync_api")

from tandv_tb.diagnosis.cli import FOLD_HINT  # noqa: E402
from tests.helpers.browser import TIMEOUT_MS, css, fetch, open_tab, serve  # noqa: E402
from tests.helpers.demo_logdir import short_demo  # noqa: E402
from tests.helpers.findings_cli import cli, cli_json  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]
RUNS = ["jax/lr_3e-3", "tandv_import", "torch/lr_2e-1", "torch/lr_3e-3"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return short_demo(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def tensorboard(demo):
    with serve(demo, b"tandv_import") as url:
        yield url


@pytest.fixture(scope="module")
def route(tensorboard) -> dict:
    query = urllib.parse.urlencode([("run", run) for run in RUNS])
    return json.loads(fetch(tensorboard, f"findings?{query}")[0])


def findings_ready(frame) -> None:
    frame.wait_for_selector(
        '[data-card="findings"][data-state="ready"]:not(.tv-loading)', timeout=TIMEOUT_MS
    )


def saved_state(frame) -> dict:
    hash_ = urllib.parse.parse_qs(frame.evaluate("location.hash").lstrip("#"))
    return json.loads(hash_["state"][0])


def test_the_card_tells_what_the_command_line_prints(browser, tensorboard, demo, route):
    with open_tab(browser, tensorboard) as tab:
        findings_ready(tab.frame)
        card = tab.frame.locator('[data-card="findings"]')
        # headlines: the same sentences as the command line's first lines, in run order
        printed = cli("findings", str(demo)).stdout.splitlines()
        headlines = card.locator(".tv-headline")
        assert headlines.count() == len(RUNS)
        for i, run in enumerate(RUNS):
            row = headlines.nth(i)
            assert row.get_attribute("data-run") == run
            text = row.locator(".tv-finding-message").inner_text()
            assert printed[i] == f"{run.ljust(len('torch/lr_2e-1'))}  {text}"
        problem = card.locator('.tv-headline[data-problem="true"]')
        assert problem.count() == 1
        assert problem.get_attribute("data-run") == "torch/lr_2e-1"
        assert (problem.get_attribute("data-kind"), problem.get_attribute("data-step")) == (
            "overflow",
            "5",
        )
        # the first level: the command line's rows, no more, what is expected of the formats
        # folded (per run: its element formats' underflow and scales, its block formats);
        # every group of --json behind them
        _, groups = cli_json(demo)
        table = [
            row for row in printed[len(RUNS) + 2 :] if row.split()[2:3] and row.split()[2].isdigit()
        ]
        top = card.locator(
            ".tv-finding-group:not(.tv-findings-folded .tv-finding-group), .tv-finding-fold"
        )
        assert top.count() == len(table) and len(printed) <= 20
        assert card.locator(".tv-finding-group").count() == len(groups) == len(route["groups"])
        shown = sorted(top.locator(".tv-finding-message").all_text_contents())  # info: folded
        assert shown == sorted(row.split(maxsplit=5)[5].removesuffix(FOLD_HINT) for row in table)
        printed_tensors = sorted(
            (row.split()[1], int(row.split()[4])) for row in table if row.endswith(FOLD_HINT)
        )
        folds = card.locator(".tv-finding-fold")
        assert folds.count() == len(route["folds"]) == len(printed_tensors) > 0
        assert printed_tensors == sorted(
            (fold.get_attribute("data-run"), int(fold.get_attribute("data-tensors")))
            for fold in folds.all()
        )
        for fold, served in zip(folds.all(), route["folds"]):
            kinds = [route["groups"][i]["kind"] for i in served["groups"]]
            inside = fold.locator("xpath=..").locator("details.tv-findings-folded")
            assert inside.locator(".tv-finding-group").count() == len(kinds)
            counts = ", ".join(f"{kinds.count(k)} {k}" for k in dict.fromkeys(kinds))
            assert inside.locator(":scope > summary").inner_text() == (
                f"{len(kinds)} groups: {counts}"
            )
        # one divergence, of the torch runs
        parted = card.locator('.tv-finding-group[data-kind="divergence"]')
        assert parted.count() == 1 and parted.get_attribute("data-run") == "torch/lr_2e-1"
        assert "'torch/lr_3e-3'" in parted.inner_text()
        compared = card.locator(".tv-findings-compared").inner_text()
        assert compared.startswith(
            "Divergence: compared torch/lr_2e-1 with torch/lr_3e-3; tandv_import holds the "
            "same values as torch/lr_3e-3 (compared through it); not compared: jax/lr_3e-3"
        )
        assert "minus menu" in compared
        # every finding, one per tensor, is behind its group's disclosure (in a fold, the
        # info section)
        for folded in card.locator("details.tv-findings-folded").all():
            folded.locator(":scope > summary").click()
        card.locator("details.tv-findings-info > summary").click()
        for each in card.locator("details.tv-findings-each").all():
            each.locator("summary").click()
        members = card.locator(".tv-finding-member")
        members.nth(0).wait_for(timeout=TIMEOUT_MS)
        in_groups = sum(len(g["findings"]) for g in groups if len(g["findings"]) > 1)
        assert members.count() == in_groups


def test_the_tab_opens_on_the_headline(browser, tensorboard, route):
    """With nothing chosen, the heatmap shows the overflow: its run, tensor type, metric
    and format, the cell of its first tensor marked, the histogram there at its step."""
    first = route["findings"][route["headlines"][2]["finding"]]
    assert (first["run"], first["kind"], first["step"]) == ("torch/lr_2e-1", "overflow", 5)
    with open_tab(browser, tensorboard) as tab:
        findings_ready(tab.frame)
        marker = tab.frame.locator(".tv-cell-marker")
        marker.wait_for(state="visible", timeout=TIMEOUT_MS)
        assert marker.get_attribute("data-layer") == first["name"]
        tab.ready("heatmap")
        chosen = {
            name: tab.frame.locator(f'select[name="{name}"]').input_value()
            for name in ("heatmapRun", "tensorType", "metric", "metricFormat")
        }
        assert chosen == {
            "heatmapRun": "torch/lr_2e-1",
            "tensorType": "Activation",
            "metric": "overflow_fraction",
            "metricFormat": "float8_e4m3fn",
        }
        panel = tab.panel(first["name"])
        panel.wait_for(timeout=TIMEOUT_MS)
        tab.ready("histogram")
        stats = panel.locator('.tv-hist-stats[data-run="torch/lr_2e-1"]')
        assert stats.get_attribute("data-step") == "5"
        pressed = tab.frame.locator('.tv-headline[aria-pressed="true"]')
        assert pressed.get_attribute("data-run") == "torch/lr_2e-1"
        state = saved_state(tab.frame)
        assert state["followHeadline"] is True
        assert (state["heatmapRun"], state["layer"], state["step"]) == (
            "torch/lr_2e-1",
            first["name"],
            5,
        )
        # a choice of the user's ends it, and is kept across a reload
        tab.frame.select_option('select[name="metric"]', "log2_max_abs")
        tab.ready("heatmap")
        assert saved_state(tab.frame)["followHeadline"] is False
        tab.page.reload()
        frame = tab.page.wait_for_selector("iframe", timeout=TIMEOUT_MS).content_frame()
        findings_ready(frame)
        frame.wait_for_selector(f'.tv-cell-marker[data-layer="{css(first["name"])}"]')
        assert frame.locator('select[name="metric"]').input_value() == "log2_max_abs"


def test_the_users_view_in_the_address_wins(browser, tensorboard):
    view = {"heatmapRun": "torch/lr_3e-3", "tensorType": "Gradient", "metric": "log2_max_abs"}
    with open_tab(browser, tensorboard) as tab:
        # a link that names a view, opened by someone with nothing saved
        tab.frame.evaluate("localStorage.clear()")
        base = tab.frame.url.split("#")[0]
        tab.frame.goto(f"{base}#{urllib.parse.urlencode({'state': json.dumps(view)})}")
        with tab.frame.expect_navigation():
            tab.frame.evaluate("location.reload()")
        tab.frame.wait_for_selector('#tandv-numerics[data-state="ready"]', timeout=TIMEOUT_MS)
        findings_ready(tab.frame)
        tab.ready("heatmap")
        for name, value in view.items():
            assert tab.frame.locator(f'select[name="{name}"]').input_value() == value
        assert tab.frame.locator(".tv-cell-marker").is_hidden()
        state = saved_state(tab.frame)
        assert {key: state[key] for key in view} == view
        assert state["followHeadline"] is False


def test_a_view_saved_for_another_logdir_does_not_hold_the_tab(browser, tensorboard, route):
    """The same address served another logdir before: its saved view names a run this one
    lacks, so the tab opens on this logdir's headline."""
    first = route["findings"][route["headlines"][2]["finding"]]
    elsewhere = {"heatmapRun": "elsewhere/run", "metric": "mean", "followHeadline": False}
    with open_tab(browser, tensorboard) as tab:
        findings_ready(tab.frame)
        tab.frame.wait_for_selector(".tv-cell-marker", state="visible", timeout=TIMEOUT_MS)
        tab.ready("heatmap")  # nothing more to save
        tab.frame.evaluate(
            "state => localStorage.setItem('tandv_tb.numerics.state.v1', JSON.stringify(state))",
            elsewhere,
        )
        tab.frame.goto(tab.frame.url.split("#")[0])  # the frame loaded afresh, no address
        findings_ready(tab.frame)
        tab.frame.wait_for_selector(
            f'.tv-cell-marker[data-layer="{css(first["name"])}"]', timeout=TIMEOUT_MS
        )
        assert tab.frame.locator('select[name="heatmapRun"]').input_value() == "torch/lr_2e-1"
        assert tab.frame.locator('select[name="metric"]').input_value() == "overflow_fraction"
        assert saved_state(tab.frame)["followHeadline"] is True
