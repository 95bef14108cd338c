"""The block-scaled formats in the Numerics tab, in real Chromium against a real
``tensorboard`` over three runs: a small PyTorch training tracked with ``mxfp4_e2m1`` and
``nvfp4``, a run of crafted tensors whose fate in ``mxfp4_e2m1`` is known (zero blocks,
saturation, scales that clamp; ``tests/helpers/block_runs.py``) and a run without block
formats. The format picker lists the recorded block formats apart; every number the tab
shows for a block format (heatmap cells, the histogram's shares, its scale distribution
with zero and clamped blocks, the CSV export) is what ``read_frame(format=...)`` and the
store hold; a block format a run did not record is said to be given to ``formats=``,
never estimated."""

from __future__ import annotations

import csv
import io
import json
import math
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("playwright.sync_api")
torch = pytest.importorskip("torch")

from tandv_tb.frame import read_frame  # noqa: E402
from tandv_tb.store import NumericsStore  # noqa: E402
from tests.helpers.block_runs import (  # noqa: E402
    BLOCKS,
    MXFP4,
    write_block_run,
    write_plain_run,
)
from tests.helpers.browser import (  # noqa: E402
    TIMEOUT_MS,
    Tab,
    css,
    fetch,
    serve,
)
from tests.helpers.plugin import heatmap_values  # noqa: E402
from tests.helpers.torch_models import train  # noqa: E402

pytestmark = pytest.mark.timeout(240)
MX = "mxfp4_e2m1"
TRAINED = ("mxfp4_e2m1", "nvfp4")
TRAINED_STEPS = 4
RUNS = ("blocks", "plain", "trained")
GROUP = "block-scaled (recorded)"


class Truth:
    """What ``read_frame`` and a store of its own (not the plugin's) hold for the logdir."""

    def __init__(self, logdir: Path, cache: Path):
        self.logdir = logdir
        self.frames: dict[tuple[str, str], object] = {}
        self.store = NumericsStore(str(logdir), cache, refresh_secs=0)
        for run in RUNS:
            self.store.refresh(run)

    def row(self, run: str, layer: str, step: int, format_name: str, tensor_type="Activation"):
        if (run, format_name) not in self.frames:
            self.frames[run, format_name] = read_frame(self.logdir, run=run, format=format_name)
        frame = self.frames[run, format_name]
        meta = frame["metadata"]
        chosen = frame[
            (meta["name"] == layer) & (meta["step"] == step) & (meta["tensor_type"] == tensor_type)
        ]
        assert len(chosen) == 1, (run, layer, step)
        return chosen.iloc[0]

    def shares(self, run: str, layer: str, step: int, format_name: str) -> dict[str, int]:
        """``numel``, ``underflow`` and ``overflow`` of a block format, as ``read_frame``
        shows them: ``-inf`` holds the zeros plus the underflow, ``+inf`` the overflow plus
        the infinities."""
        row = self.row(run, layer, step, format_name)
        stats, counts = row["scalar_stats"], row["exponent_counts"]
        infinities = int(stats["posinf_count"] + stats["neginf_count"])
        return {
            "numel": int(stats["numel"]),
            "underflow": int(counts[-math.inf]) - int(stats["zero_count"]),
            "overflow": int(counts[math.inf]) - infinities,
        }

    def blocks(self, run: str, layer: str, format_name: str, tensor_type="Activation"):
        """``(steps, {column: values}, {step: {scale exponent: blocks}})`` of the store."""
        for tag_id, info, _ in self.store.tags(run).values():
            if info is not None and (info.name, info.tensor_type) == (layer, tensor_type):
                index = info.block_formats.index(format_name)
                rows = self.store.blocks(run, {tag_id: index})
                steps, exponents, counts = self.store.block_scales(run, tag_id, index)
                scales = {
                    int(s): {
                        int(k): int(c) for k, c in zip(exponents[steps == s], counts[steps == s])
                    }
                    for s in rows.steps
                }
                return rows.steps.tolist(), rows.columns, scales
        raise AssertionError(f"no tag {tensor_type} {layer!r} in run {run!r}")

    def block(self, run: str, layer: str, step: int, format_name: str) -> dict:
        steps, columns, scales = self.blocks(run, layer, format_name)
        at = steps.index(step)
        got = {name: values[at].item() for name, values in columns.items()}
        got["scales"] = scales[step]
        return got


def _snr_db(signal: float, error: float) -> float:
    return 10 * math.log10(signal / error) if error else math.inf


@pytest.fixture(scope="module")
def logdir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("browser_blocks")
    write_block_run(root / "blocks")
    write_plain_run(root / "plain")
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 64), torch.nn.GELU(), torch.nn.Linear(64, 40)
    )  # 40: a partial last block for both formats
    train(model, root / "trained", TRAINED_STEPS, formats=TRAINED)
    return root


@pytest.fixture(scope="module")
def truth(logdir, tmp_path_factory) -> Iterator[Truth]:
    found = Truth(logdir, tmp_path_factory.mktemp("truth_cache"))
    yield found
    found.store.close()


@pytest.fixture(scope="module")
def tensorboard(logdir) -> Iterator[str]:
    with serve(logdir, b'"plain"') as url:
        deadline = time.monotonic() + 60
        while not all(f'"{run}"'.encode() in fetch(url, "runs")[0] for run in RUNS):
            assert time.monotonic() < deadline, "tensorboard did not list every run"
            time.sleep(0.25)
        yield url


def options(tab: Tab, name: str) -> list[tuple[str, str]]:
    """``(value, optgroup label or "")`` of each option of the select ``name``."""
    found = tab.frame.locator(f'select[name="{name}"] option').evaluate_all(
        "os => os.map(o => [o.value, o.parentElement.tagName === 'OPTGROUP'"
        " ? o.parentElement.label : ''])"
    )
    return [tuple(pair) for pair in found]


def choose(tab: Tab, **chosen: str) -> dict:
    """Choose the heatmap's run, metric and format (in the order given), and the heatmap's
    answer to the last choice that changed something."""
    body = None
    for name, value in chosen.items():
        if tab.frame.locator(f'select[name="{name}"]').input_value() == value:
            continue  # already chosen: nothing is asked again
        with tab.page.expect_response(lambda r: "/heatmap?" in r.url) as answer:
            tab.frame.select_option(f'select[name="{name}"]', value)
        body = answer.value
    assert body is not None, "nothing was chosen"
    tab.ready("heatmap")
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(body.url).query))
    return {"query": query, "status": body.status, "json": json.loads(body.text())}


def cells(answer: dict) -> dict[str, dict[int, float | None]]:
    """``layer -> step -> value`` of a heatmap answer of one step per column."""
    body = answer["json"]
    assert all(column["count"] == 1 for column in body["columns"])
    steps = [column["step"] for column in body["columns"]]
    return {
        layer["layer"]: dict(zip(steps, row))
        for layer, row in zip(body["layers"], heatmap_values(body))
    }


def only(tab: Tab, *runs: str) -> None:
    """Tick ``runs`` alone."""
    for run in RUNS:
        box = tab.frame.locator(f'input[name="runs:{run}"]')
        if box.is_checked() != (run in runs):
            box.set_checked(run in runs)
            tab.ready("heatmap")
    picker = tab.frame.locator('select[name="heatmapRun"]')  # shown for several runs
    assert picker.count() == 0 or picker.input_value() == runs[0]


def click(tab: Tab, layer: str, step: int) -> None:
    """Click the heatmap's cell of ``layer`` at ``step`` (one step per column)."""
    heatmap = tab.frame.locator(".tv-heatmap")
    rows = int(heatmap.get_attribute("data-rows"))
    columns = int(heatmap.get_attribute("data-columns"))
    row = int(tab.label(layer).get_attribute("data-row"))
    canvas = tab.frame.locator("canvas.tv-heatmap-canvas")
    box = canvas.bounding_box()
    with tab.page.expect_response(lambda r: "/histogram?" in r.url):
        canvas.click(
            position={
                "x": (step + 0.5) * box["width"] / columns,
                "y": (row + 0.5) * box["height"] / rows,
            }
        )


def check_panel(tab: Tab, truth: Truth, run: str, layer: str, step: int, formats) -> None:
    """The panel of ``layer`` shows, for each block format, the shares ``read_frame`` gives
    and the store's blocks per scale exponent, zero and clamped blocks."""
    panel = tab.panel(layer)
    panel.locator(f'.tv-block-scale[data-format="{css(formats[0])}"]').wait_for(timeout=TIMEOUT_MS)
    tab.ready("histogram")
    assert panel.get_attribute("data-step") == str(step)
    for name in formats:
        want = truth.shares(run, layer, step, name)
        stored = truth.block(run, layer, step, name)
        assert (stored["underflow"], stored["overflow"]) == (want["underflow"], want["overflow"])
        row = panel.locator(f'tr.tv-block-stat[data-format="{css(name)}"][data-run="{run}"]')
        assert row.get_attribute("data-exact") == "true"
        assert int(row.get_attribute("data-underflow")) == want["underflow"]
        assert int(row.get_attribute("data-overflow")) == want["overflow"]
        text = row.inner_text()
        assert f"{want['underflow']:,}" in text and f"{want['overflow']:,}" in text
        assert "exact" in text and "SNR" in text
        snr = _snr_db(stored["signal"], stored["error"])
        if math.isfinite(snr):
            assert float(row.get_attribute("data-snr")) == pytest.approx(snr, rel=1e-6)
        chart = panel.locator(f'.tv-block-scale[data-format="{css(name)}"]')
        drawn = chart.locator(f'rect.tv-block-bar[data-run="{run}"]').evaluate_all(
            "rs => rs.map(r => [r.dataset.kind, Number(r.dataset.count)])"
        )
        scaled = [c for kind, c in drawn if kind == "scale"]
        assert sorted(scaled) == sorted(stored["scales"].values())
        assert sum(scaled) == stored["total_blocks"] - stored["zero_blocks"]
        assert [c for kind, c in drawn if kind == "zero"] == [stored["zero_blocks"]]
        clamped = sum(c for kind, c in drawn if kind == "clamped")
        assert clamped == stored["clamped_low"] + stored["clamped_high"]


def test_the_picker_lists_block_formats_apart_and_the_heatmap_shows_them(tab, truth):
    metrics = [value for value, _ in options(tab, "metric")]
    assert "snr_db" in metrics and "clamped_block_fraction" in metrics
    choose(tab, heatmapRun="trained", metric="underflow_fraction")
    listed = options(tab, "metricFormat")
    recorded = sorted(set(BLOCKS) | set(TRAINED))  # by any ticked run
    assert [value for value, group in listed if group == GROUP] == recorded
    assert ("float8_e4m3fn", "") in listed  # the element formats, apart
    assert all(value not in recorded for value, group in listed if group != GROUP)
    for metric, name in (("underflow_fraction", "nvfp4"), ("overflow_fraction", MX)):
        answer = choose(tab, metric=metric, metricFormat=name)
        assert answer["status"] == 200 and answer["query"]["format"] == name
        assert all(answer["json"]["exact"])
        shown = cells(answer)
        seen = 0
        for layer, by_step in shown.items():
            for step, value in by_step.items():
                want = truth.shares("trained", layer, step, name)
                share = want[metric.split("_")[0]] / want["numel"]
                assert value == pytest.approx(share, rel=1e-6), (layer, step)
                seen += want[metric.split("_")[0]]
        assert seen > 0, f"no {metric} in {name}: nothing is compared"
    # a metric of block formats only: the picker lists the block formats alone
    answer = choose(tab, metric="snr_db")
    assert {group for _, group in options(tab, "metricFormat")} == {GROUP}
    assert answer["status"] == 200 and answer["query"]["format"] == MX
    for layer, by_step in cells(answer).items():
        steps, columns, _ = truth.blocks("trained", layer, MX)
        for step, value in by_step.items():
            at = steps.index(step)
            want = _snr_db(columns["signal"][at], columns["error"][at])
            assert value == pytest.approx(want, rel=1e-5), (layer, step)
    tab.screenshot("blocks_heatmap_snr")
    # the crafted run: the blocks whose scale clamps
    answer = choose(tab, heatmapRun="blocks", metric="clamped_block_fraction")
    assert answer["query"]["format"] == MX
    for layer, by_step in cells(answer).items():
        steps, columns, _ = truth.blocks("blocks", layer, MX)
        for step, value in by_step.items():
            at = steps.index(step)
            clamped = columns["clamped_low"][at] + columns["clamped_high"][at]
            assert value == pytest.approx(clamped / columns["total_blocks"][at]), layer
    assert cells(answer)["tiny"][0] == 1.0  # every block of the crafted 'tiny' clamps


def test_the_histogram_of_a_trained_run_and_its_csv(tab, truth, tensorboard):
    only(tab, "trained")
    layers = tab.frame.locator('.tv-row-label[data-kind="layer"]')
    names = layers.evaluate_all("ls => ls.map(l => l.dataset.key)")
    layer = max(names, key=lambda n: truth.shares("trained", n, 2, MX)["underflow"])
    click(tab, layer, 2)
    check_panel(tab, truth, "trained", layer, 2, TRAINED)
    tab.screenshot("blocks_histogram_trained")
    # the CSV export of the panel's layer: every step, as the store holds it
    tab.frame.locator('[data-control="export"] > summary').click()
    link = tab.frame.locator('a[data-export="Block formats (trained)"]')
    body, kind = fetch(tensorboard, link.get_attribute("href"))
    assert kind.startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(body.decode())))
    assert [(r["layer"], int(r["step"])) for r in rows] == [
        (layer, s) for s in range(TRAINED_STEPS)
    ]
    for name in TRAINED:
        steps, columns, scales = truth.blocks("trained", layer, name)
        for row, step in zip(rows, steps):
            at = steps.index(step)
            for count in ("underflow", "overflow", "zero_blocks", "clamped_low", "clamped_high"):
                assert int(row[f"{name}:{count}"]) == columns[count][at], (name, count)
            assert int(row[f"{name}:blocks"]) == columns["total_blocks"][at]
            written = {
                int(key.rsplit(":", 1)[1]): int(value)
                for key, value in row.items()
                if key.startswith(f"{name}:scale:") and int(value)
            }
            assert written == scales[step]
            want = _snr_db(columns["signal"][at], columns["error"][at])
            assert float(row[f"{name}:snr_db"]) == pytest.approx(want, rel=1e-9)
    # the Activation numbers are also what read_frame says
    for row in rows:
        want = truth.shares("trained", layer, int(row["step"]), "nvfp4")
        assert int(row["nvfp4:underflow"]) == want["underflow"]


def test_the_histogram_shows_saturation_and_clamped_scales(tab, truth):
    only(tab, "blocks")
    for layer, step in (("tiny", 4), ("saturating", 2)):
        click(tab, layer, step)
        check_panel(tab, truth, "blocks", layer, step, BLOCKS)
        tab.screenshot(f"blocks_histogram_{layer}")
    # the crafted cases are what the tab was checked on: clamped blocks, saturation
    assert truth.block("blocks", "tiny", 4, MX)["clamped_low"] == MXFP4["tiny"][3] > 0
    assert truth.shares("blocks", "saturating", 2, MX)["overflow"] == MXFP4["saturating"][1]


@pytest.mark.page_errors(
    "a heatmap of a block format the run did not record: the server's 400 is what is shown",
    r"status of 400 \(BAD REQUEST\)",
    r"^HTTP 400: .*/heatmap\?",
)
def test_a_block_format_a_run_did_not_record_is_never_estimated(tab):
    only(tab, "blocks", "plain")
    click(tab, "spiky", 3)
    tab.panel("spiky").wait_for(timeout=TIMEOUT_MS)
    tab.ready("histogram")
    # tick the block format alone: its row and chart, no element format
    tab.frame.locator('[data-card="histogram"] details.tv-more > summary').click()
    tab.frame.locator(f'input[name="blockOverlays:{MX}"]').check()
    panel = tab.panel("spiky")
    panel.locator(f'tr.tv-block-stat[data-format="{MX}"]').wait_for(timeout=TIMEOUT_MS)
    tab.ready("histogram")
    assert panel.locator("tr.tv-format-stat:not(.tv-block-stat)").count() == 0
    assert panel.locator("tr.tv-block-stat").count() == 1
    assert panel.locator(".tv-block-scale").count() == 1
    # compare with the run that did not record it: its panel says so
    tab.frame.select_option('select[name="compare"]', "side")
    note = tab.frame.locator(".tv-block-missing")
    note.wait_for(timeout=TIMEOUT_MS)
    text = note.inner_text()
    assert f"{MX} was not recorded for run plain" in text and f"give '{MX}' to formats=" in text
    assert "cannot be estimated" in text
    assert tab.panel("spiky").locator('tr.tv-block-stat[data-run="plain"]').count() == 0
    tab.screenshot("blocks_not_recorded")
    # the heatmap of that run in that format: the server's 400, said on the card
    tab.frame.select_option('select[name="metric"]', "underflow_fraction")
    tab.frame.select_option('select[name="metricFormat"]', MX)
    tab.ready("heatmap")
    with tab.page.expect_response(lambda r: "/heatmap?" in r.url) as answer:
        tab.frame.select_option('select[name="heatmapRun"]', "plain")
    assert answer.value.status == 400
    error = tab.frame.locator('[data-card="heatmap"] .tv-error')
    error.wait_for(timeout=TIMEOUT_MS)
    assert "cannot be estimated" in error.inner_text() and "formats=" in error.inner_text()
    # with only the run that did not record one, no block format is offered as recorded,
    # the one chosen is listed as not recorded, and no metric of block formats is offered
    tab.frame.locator('input[name="runs:blocks"]').uncheck()
    tab.frame.select_option('select[name="metric"]', "zero_fraction")
    tab.ready("heatmap")
    assert "snr_db" not in [value for value, _ in options(tab, "metric")]
    tab.frame.select_option('select[name="metric"]', "underflow_fraction")
    error.wait_for(timeout=TIMEOUT_MS)
    blocks = [(value, group) for value, group in options(tab, "metricFormat") if value in BLOCKS]
    assert blocks == [(MX, "block-scaled (not recorded: give it to formats=)")]
