"""``tandv-tb findings`` on the demo's runs, as a new user runs it: the story on one screen.

The demo (``demo/make_demo.py``, shortened) holds a healthy and an unstable run of one
PyTorch model, a JAX model and an import of the healthy run. What the default output must
say, each fact cross-checked against the findings one per tensor: the float8_e4m3fn
overflow of ``torch/lr_2e-1`` (its step and format) as that run's headline, its loss
spike, where the two torch runs part, and no divergence between the JAX, PyTorch and
imported runs."""

from __future__ import annotations

import shutil

import pytest

import tandv_tb
from tandv_tb.diagnosis.cli import FOLD_HINT
from tandv_tb.formats.blocks import is_block_format
from tests.helpers.demo_logdir import TORCH_RUNS, short_demo
from tests.helpers.findings_cli import cli, cli_json
from tests.helpers.findings_groups import check_groups, format_named

pytestmark = pytest.mark.slow
SCREEN = 20  # lines


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return short_demo(tmp_path_factory.mktemp("demo"))


def per_tensor(logdir):
    return tandv_tb.findings(logdir, grouped=False, cache_dir=logdir.parent / "cache")


def check_story(logdir, runs: list[str]) -> list[str]:
    """The default output's lines, once they are checked to tell the demo's story."""
    every = per_tensor(logdir)
    done = cli("findings", str(logdir))
    assert done.returncode == 1, done.stderr  # the overflow is an error
    lines = done.stdout.splitlines()
    assert len(lines) <= SCREEN, done.stdout
    headlines = dict(line.split(maxsplit=1) for line in lines[: len(runs)])
    assert sorted(headlines) == sorted(runs)
    overflow = every[(every.run == "torch/lr_2e-1") & (every.kind == "overflow")]
    first = overflow[overflow.severity == "error"].step.min()
    assert headlines["torch/lr_2e-1"].startswith(f"float8_e4m3fn overflows from step {first}:")
    assert all(headlines[run] == "no problem found" for run in runs if run != "torch/lr_2e-1")
    rows = lines[len(runs) + 2 :]
    spikes = every[every.kind == "loss_spike"]
    assert list(spikes.run) == ["torch/lr_2e-1"]
    assert any(
        f"torch/lr_2e-1  {spikes.step.iloc[0]} " in row and "loss_spike" in row for row in rows
    )
    parted = every[every.kind == "divergence"]
    assert list(zip(parted.run, parted.message.str.split("'").str[3])) == [TORCH_RUNS]
    (row,) = [row for row in rows if "divergence" in row]
    assert f"part at step {parted.step.iloc[0]}" in row
    check_folds(logdir, rows)
    return lines


def check_folds(logdir, rows: list[str]) -> None:
    """The groups follow the contract's key; the default output shows each of them but the
    underflow groups and the scales remedying them, and every group of a block-scaled
    format, which take one line per run for its element formats and one for its block
    formats (with the number of their tensors); ``--groups`` prints every group."""
    _, groups = cli_json(logdir)
    _, listed = cli_json(logdir, "--all")
    check_groups(groups, listed)
    underflowing = {
        (f["run"], format_named(f["message"]), f["tensor_type"], f["name"])
        for f in listed
        if f["kind"] == "underflow"
    }
    folded: dict[tuple[str, bool], dict[str, list[dict]]] = {}
    for g in groups:
        first = g["findings"][0]
        format_name = format_named(first["message"])
        block = bool(format_name) and is_block_format(format_name)
        remedy = (g["run"], format_name, first["tensor_type"], first["name"]) in underflowing
        if block or g["kind"] == "underflow" or (g["kind"] == "scale" and remedy):
            folded.setdefault((g["run"], block), {}).setdefault(format_name, []).append(g)
    table = [row for row in rows if row.split()[2:3] and row.split()[2].isdigit()]
    assert len(table) == len(groups) - sum(
        sum(map(len, by_format.values())) - 1 for by_format in folded.values()
    )
    for (run, block), by_format in folded.items():
        together = [g for gs in by_format.values() for g in gs]
        assert len(together) > 1  # in the demo, every run and kind of format has several
        names = list(by_format)
        names = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        lead = (
            f"  {names}, block-scaled (what {'they' if len(by_format) > 1 else 'it'} would lose)"
            if block
            else f"  {names} without a scale (expected)"
        )
        (line,) = [row for row in table if row.split()[1] == run and lead in row]
        about = [g for g in together if block or g["kind"] == "underflow"]
        tensors = {(f["tensor_type"], f["name"]) for g in about for f in g["findings"]}
        assert row_kind_and_count(line) == ("underflow", len(tensors))
        if len(by_format) > 1:  # each format said with its numbers, in turn
            for format_name in by_format:
                assert f": {format_name}: " in line or f"; {format_name}: " in line
        kinds = [g["kind"] for g in together]
        counts = " and ".join(
            f"{kinds.count(k)} {k}" for k in ("underflow", "overflow", "scale") if k in kinds
        )
        assert line.endswith(f"; {counts} groups, one per tensor type{FOLD_HINT}")
    assert any(block for _, block in folded)  # the demo's torch runs record block formats
    printed = cli("findings", str(logdir), "--groups").stdout.splitlines()
    assert len([r for r in printed if r.split()[2:3] and r.split()[2].isdigit()]) == len(groups)


def row_kind_and_count(line: str) -> tuple[str, int]:
    _, _, _, kind, tensors, *_ = line.split()
    return kind, int(tensors)


def test_the_demo_fits_a_screen(demo):
    lines = check_story(demo, ["jax/lr_3e-3", "tandv_import", *TORCH_RUNS])
    assert lines[-1] == (
        "Divergence: compared torch/lr_2e-1 with torch/lr_3e-3; tandv_import holds the same "
        "values as torch/lr_3e-3 (compared through it); not compared: jax/lr_3e-3 shares under "
        "half of its tensors with every other run (--compare RUN_A RUN_B compares any two)"
    )


def test_two_runs_of_the_same_model_fit_a_screen(demo, tmp_path):
    logdir = tmp_path / "two"
    for run in TORCH_RUNS:
        shutil.copytree(demo / run, logdir / run)
    lines = check_story(logdir, list(TORCH_RUNS))
    assert lines[-1] == "Divergence: compared torch/lr_2e-1 with torch/lr_3e-3"
