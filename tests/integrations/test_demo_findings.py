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
from tests.helpers.demo_logdir import TORCH_RUNS, short_demo
from tests.helpers.findings_cli import cli

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
    return lines


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
