"""Hostile layer names (markup, quotes, slashes, ``..``, CJK, emoji, RTL, control characters,
1,000 characters) go through every path unchanged: recorded by ``NumericsWriter`` and by the
PyTorch tracker (as ``ModuleDict`` keys, where torch allows them), served by a real
``tensorboard`` process, exported to CSV (parsed back exactly) and shown in Chromium as text
only: no element or script of theirs ever exists."""

from __future__ import annotations

import csv
import io
import json
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import tandv_tb.torch
from tandv_tb import stats
from tandv_tb.frame import read_frame
from tandv_tb.writer import NumericsWriter
from tests.helpers.browser import TIMEOUT_MS, fetch, open_tab, serve

pytestmark = pytest.mark.timeout(240)

NAMES = (
    "<img src=x onerror=alert(1)>",
    "<script>alert(2)</script>",
    "\"double\" 'single', comma; semi",
    "a/b\\c//d",
    "../../etc/passwd",
    "注意力层",
    "🔥layer🚀",
    "שכבה \u202eevil\u202c",
    "tab\tand\nnewline",
    "<i>" + "ü" * 993 + "</i>",
)
assert len(NAMES[-1]) == 1000
#: ModuleDict keys torch accepts (it refuses a '.' in a module name); the long one cut so
#: that its recorded name ``blocks.<key>`` is 1,000 characters too (the plugin's longest
#: query parameter).
TORCH_KEYS = tuple(
    name if len(name) < 1000 else f"<i>{'ü' * 986}</i>" for name in NAMES if "." not in name
)
STEPS = (0, 1, 2)


class HostileModel(nn.Module):
    """Linear layers held by a ModuleDict under hostile keys, run in key order."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleDict({key: nn.Linear(4, 4) for key in TORCH_KEYS})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks.values():
            x = block(x)
        return x


def write_logdir(root: Path) -> None:
    """Run ``writer``: every name through add_numerics (Activation) and add_record
    (Gradient); run ``torch``: the tracked HostileModel."""
    rng = np.random.default_rng(3)
    with NumericsWriter(str(root / "writer"), formats=("float8_e4m3fn",)) as writer:
        for step in STEPS:
            for name in NAMES:
                values = rng.standard_normal(64).astype(np.float32)
                writer.add_numerics(name, values, step)
                record = stats.tensor_stats(values * np.float32(1e-3)).to_record()
                writer.add_record(name, record, step, "Gradient")
    torch.manual_seed(0)
    model = HostileModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with tandv_tb.torch.track(model, logdir=str(root / "torch"), optimizer=optimizer) as tracker:
        for _ in STEPS:
            loss = model(torch.randn(8, 4)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            tracker.step()


#: The tracked activations: each block, then the whole model (named by its class).
TORCH_ACTIVATIONS = [*(f"blocks.{key}" for key in TORCH_KEYS), "HostileModel"]


@pytest.fixture(scope="module")
def logdir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hostile_logdir")
    write_logdir(root)
    return root


@pytest.fixture(scope="module")
def tensorboard(logdir: Path) -> Iterator[str]:
    with serve(logdir, b'"torch"') as url:
        yield url


def _query(**params) -> str:
    return urllib.parse.urlencode(params, doseq=True)


def _csv(url: str, route: str, **params) -> list[dict[str, str]]:
    body, content_type = fetch(url, f"{route}?{_query(**params)}")
    assert content_type.startswith("text/csv")
    return list(csv.DictReader(io.StringIO(body.decode("utf-8"), newline="")))


def test_torch_refuses_only_the_dotted_names():
    assert len(TORCH_KEYS) == len(NAMES) - 1 and "../../etc/passwd" not in TORCH_KEYS
    assert max(len(f"blocks.{key}") for key in TORCH_KEYS) == 1000
    with pytest.raises(KeyError):
        nn.ModuleDict({"../../etc/passwd": nn.Linear(1, 1)})


def test_names_are_recorded_exactly(logdir):
    frame = read_frame(logdir / "writer")
    for tensor_type in ("Activation", "Gradient"):
        chosen = frame[frame["metadata", "tensor_type"] == tensor_type]
        assert list(dict.fromkeys(chosen["metadata", "name"])) == list(NAMES)
    tracked = read_frame(logdir / "torch")
    activations = tracked[tracked["metadata", "tensor_type"] == "Activation"]
    assert list(dict.fromkeys(activations["metadata", "name"])) == TORCH_ACTIVATIONS
    weights = set(tracked[tracked["metadata", "tensor_type"] == "Weight"]["metadata", "name"])
    blocks = TORCH_ACTIVATIONS[:-1]
    assert weights == {f"{name}.{p}" for name in blocks for p in ("weight", "bias")}


def test_routes_give_the_exact_names(tensorboard):
    for run, names in (("writer", list(NAMES)), ("torch", TORCH_ACTIVATIONS)):
        body, _ = fetch(tensorboard, f"layers?{_query(run=run, tensor_type='Activation')}")
        assert [layer["layer"] for layer in json.loads(body)["layers"]] == names
        heat = json.loads(
            fetch(
                tensorboard,
                f"heatmap?{_query(run=run, tensor_type='Activation', metric='log2_rm2')}",
            )[0]
        )
        assert [layer["layer"] for layer in heat["layers"]] == names
        for name in names:
            histogram = json.loads(
                fetch(
                    tensorboard,
                    f"histogram?{_query(run=run, tensor_type='Activation', layer=name)}",
                )[0]
            )
            assert [layer["layer"] for layer in histogram["layers"]] == [name]


def test_csv_routes_give_the_exact_names_quoted(tensorboard):
    names = list(NAMES)
    common = {"run": "writer", "tensor_type": "Activation"}
    assert [row["layer"] for row in _csv(tensorboard, "layers.csv", **common)] == names
    heat = _csv(tensorboard, "heatmap.csv", metric="log2_rm2", **common)
    assert [row["layer"] for row in heat] == names
    histogram = _csv(tensorboard, "histogram.csv", layer=names, **common)
    assert list(dict.fromkeys(row["layer"] for row in histogram)) == names
    series = _csv(tensorboard, "series.csv", layer=names, metric=["log2_rm2", "mean"], **common)
    assert [(row["layer"], row["metric"], int(row["step"])) for row in series] == [
        (name, metric, step) for name in names for metric in ("log2_rm2", "mean") for step in STEPS
    ]
    # A run named by the tracker's ModuleDict keys, too.
    torch_rows = _csv(tensorboard, "layers.csv", run="torch", tensor_type="Activation")
    assert [row["layer"] for row in torch_rows] == TORCH_ACTIVATIONS


def _check_labels(tab, names: list[str]) -> None:
    """Each layer's heatmap label: present, visible, its full name as its title and the
    end of its name as its text; its histogram panel's title is the name, as text."""
    for name in names:
        label = tab.label(name)
        label.wait_for(timeout=TIMEOUT_MS)
        assert label.is_visible()
        assert label.get_attribute("title") == name
        text = label.evaluate("l => l.textContent")
        assert text and name.endswith(text)
        label.click()
        panel = tab.panel(name)
        panel.wait_for(timeout=TIMEOUT_MS)
        title = panel.locator(".tv-hist-layer")
        assert title.evaluate("t => t.textContent") == name
        assert title.is_visible()
    assert tab.injected() == []


def test_the_tab_shows_the_names_as_text_only(browser, tensorboard):
    with open_tab(browser, tensorboard) as tab:
        # The first run: the tracked model's, its ModuleDict keys under the group "blocks".
        tab.ready("heatmap")
        _check_labels(tab, TORCH_ACTIVATIONS)
        tab.screenshot("hostile_names_torch")
        # The writer's run: names without a '.' are top-level rows showing the whole name.
        tab.frame.locator('input[name="runs:writer"]').check()
        tab.frame.locator('input[name="runs:torch"]').uncheck()
        tab.label(NAMES[0]).wait_for(timeout=TIMEOUT_MS)
        tab.ready("heatmap")
        keys = tab.frame.locator('.tv-row-label[data-kind="layer"]').evaluate_all(
            "ls => ls.map(l => l.dataset.key)"
        )
        assert sorted(keys) == sorted(NAMES)
        assert tab.label(NAMES[0]).inner_text() == NAMES[0]
        assert tab.label(NAMES[1]).inner_text() == NAMES[1]
        _check_labels(tab, list(NAMES))
        assert "alert" not in tab.page.title()
        tab.screenshot("hostile_names")
