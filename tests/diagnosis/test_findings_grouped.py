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
from tests.helpers.findings_groups import check_groups, power_range
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
    # one line says the underflow of all of them (its groups folded)
    rows = [line for line in lines if " underflow " in line]
    assert len(rows) == 1 and f" {len(underflow)} " in rows[0]
    assert rows[0].endswith(" (--groups lists them)")
    # --groups: one line per tensor type that underflows
    listed = cli("findings", str(logdir), "--groups").stdout.splitlines()
    assert lines[0] == listed[0]
    rows = [line for line in listed if line.split()[3:4] == ["underflow"]]
    assert len(rows) == underflow.tensor_type.nunique() >= 2


def test_one_row_per_condition_with_its_numbers(logdir):
    per_tensor = findings(logdir, grouped=False)
    grouped = findings(logdir, grouped=True)
    underflow = per_tensor[per_tensor.kind == "underflow"]
    scales = per_tensor[per_tensor.kind == "scale"]
    frame = tandv_tb.read_frame(logdir)
    totals = frame.groupby(("metadata", "tensor_type")).apply(
        lambda rows: rows[("metadata", "name")].nunique(), include_groups=False
    )
    rows = grouped[grouped.kind == "underflow"]
    assert sorted(rows.tensor_type) == sorted(underflow.tensor_type.unique())
    for row in rows.itertuples():
        mine = underflow[underflow.tensor_type == row.tensor_type]
        assert (row.run, row.step, row.severity, row.tensors) == ("run", 0, "warning", len(mine))
        assert row.value == pytest.approx(statistics.median(mine.value))
        # "N of M <type> tensors", M every tensor of the type (from the frame, not the engine)
        assert row.message.startswith(
            f"float8_e4m3fn: {len(mine)} of {totals[row.tensor_type]} {row.tensor_type} "
            f"tensors would lose over 5% of their non-zero values to zero from step 0 "
            f"(median {percent(statistics.median(mine.value))}); "
        )
        k = scales[scales.tensor_type == row.tensor_type].value.astype(int)
        assert f"a per-tensor scale of {power_range(k)} brings" in row.message
    # every finding is in exactly one group, of the contract's key
    status, groups = cli_json(logdir)
    assert status == 1
    _, every = cli_json(logdir, "--all")
    assert len(every) == len(per_tensor)
    check_groups(groups, every)
    assert len(groups) == len(grouped)
    assert {g["kind"] for g in groups} == {"nonfinite", "underflow", "scale"}
    # printed by default: one line with the numbers of the whole condition
    tensors = frame[("metadata", "tensor_type")] + "\0" + frame[("metadata", "name")]
    (line,) = [line for line in cli("findings", str(logdir)).stdout.splitlines() if "5%" in line]
    assert (
        f"float8_e4m3fn without a scale (expected): {len(underflow)} of {tensors.nunique()} "
        f"tensors would lose over 5% of their non-zero values to zero from step 0"
    ) in line
    counts = underflow.tensor_type.value_counts()
    for tensor_type, count in counts.items():
        said = "every" if count == totals[tensor_type] else f"{count} of {totals[tensor_type]}"
        assert said in line and tensor_type in line
    assert f"median {percent(statistics.median(underflow.value))}" in line
    k = scales.value.astype(int)
    assert f"a per-tensor scale of 2^{k.min()} to 2^{k.max()}" in line
    assert f"; {len(counts)} underflow and {len(counts)} scale groups" in line
