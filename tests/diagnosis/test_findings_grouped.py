"""Grouped findings and headlines on a real training whose answer is known: one NaN among
more than 500 tensors that underflow in float8_e4m3fn."""

from __future__ import annotations

import statistics

import pandas as pd
import pytest
import torch
from torch import nn

import tandv_tb
from tandv_tb.diagnosis.base import percent
from tests.helpers.findings_cli import cli, cli_json
from tests.helpers.torch_models import Poison, set_step, train

BRANCHES = 170  # each: a Gradient and two Weight_Gradients that underflow (510 tensors)
NAN_STEP = 5


class Branches(nn.Module):
    """The sum of many small linear layers of the input."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.branches = nn.ModuleList(nn.Linear(8, 4) for _ in range(n))

    def forward(self, x):
        return torch.stack([branch(x) for branch in self.branches]).sum(0)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    """One run: the loss scaled by 1e-12 makes every gradient far smaller than
    float8_e4m3fn's smallest subnormal from step 0; at step 5 a NaN appears after the
    branches."""
    root = tmp_path_factory.mktemp("grouped")
    poison = Poison({NAN_STEP})
    torch.manual_seed(0)
    model = nn.Sequential(Branches(BRANCHES), poison)
    train(
        model,
        root / "run",
        8,
        before_step=set_step(poison),
        loss_fn=lambda out, step: 1e-12 * out.pow(2).mean(),
        formats=("float8_e4m3fn",),
    )
    return root


def findings(logdir, grouped: bool) -> pd.DataFrame:
    return tandv_tb.findings(logdir, grouped=grouped, cache_dir=logdir.parent / "cache")


def test_the_headline_names_the_nan_not_the_underflow(logdir):
    per_tensor = findings(logdir, grouped=False)
    underflow = per_tensor[per_tensor.kind == "underflow"]
    assert len(underflow) >= 500  # the training does what it is meant to
    assert underflow.step.min() == 0 < NAN_STEP  # the underflow comes first

    done = cli("findings", str(logdir))
    assert done.returncode == 1, done.stderr  # an error: a pipeline stops
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"run  first NaN/Inf of the run at step {NAN_STEP}: Activation '1'")
    assert len(lines) <= 20
    # one line says the underflow of all of them
    rows = [line for line in lines if " underflow " in line]
    assert len(rows) == 1 and f" {len(underflow)} " in rows[0]


def test_one_row_per_condition_with_its_numbers(logdir):
    per_tensor = findings(logdir, grouped=False)
    grouped = findings(logdir, grouped=True)
    underflow = per_tensor[per_tensor.kind == "underflow"]
    (row,) = grouped[grouped.kind == "underflow"].itertuples()
    assert (row.run, row.step, row.severity, row.tensors) == ("run", 0, "warning", len(underflow))
    assert row.value == pytest.approx(statistics.median(underflow.value))
    # "N of M tensors", M every tensor recording the format (from the frame, not the engine)
    frame = tandv_tb.read_frame(logdir)
    tensors = frame[("metadata", "tensor_type")] + "\0" + frame[("metadata", "name")]
    assert row.message.startswith(
        f"float8_e4m3fn: {len(underflow)} of {tensors.nunique()} tensors would lose over 5% "
        f"of their non-zero values to zero from step 0"
    )
    counts = underflow.tensor_type.value_counts()
    totals = frame.groupby(("metadata", "tensor_type")).apply(
        lambda rows: rows[("metadata", "name")].nunique(), include_groups=False
    )
    for tensor_type, count in counts.items():
        said = "every" if count == totals[tensor_type] else f"{count} of {totals[tensor_type]}"
        assert said in row.message and tensor_type in row.message
    assert f"median {percent(statistics.median(underflow.value))}" in row.message
    scales = per_tensor[per_tensor.kind == "scale"]
    k = scales.value.astype(int)
    assert f"a per-tensor scale of 2^{k.min()} to 2^{k.max()}" in row.message
    # every finding is in exactly one group: the scales in the underflow's
    status, groups = cli_json(logdir)
    assert status == 1
    listed = [f for g in groups for f in g["findings"]]
    assert len(listed) == len(per_tensor)
    (json_row,) = [g for g in groups if g["kind"] == "underflow"]
    assert {f["kind"] for f in json_row["findings"]} == {"underflow", "scale"}
    assert json_row["tensors"] == len(underflow)
