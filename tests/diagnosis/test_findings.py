"""``tandv_tb.findings`` and ``tandv-tb findings`` on crafted trainings whose answer is
known: real small torch models, the real tracker, the command line run as a process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn
from torch.utils.tensorboard import SummaryWriter

import tandv_tb
from tandv_tb import NumericsWriter
from tandv_tb.diagnosis import COLUMNS, GROUP_COLUMNS
from tests.helpers import REPO
from tests.helpers.findings_cli import cli, cli_json
from tests.helpers.findings_groups import check_groups, power_range
from tests.helpers.torch_models import NanGradient, Poison, set_step, train

NAN = float("nan")


def per_tensor(logdir: Path, **kwargs) -> pd.DataFrame:
    """``tandv_tb.findings`` one row per tensor."""
    return tandv_tb.findings(logdir, grouped=False, cache_dir=logdir.parent / "cache", **kwargs)


def only(frame: pd.DataFrame, kind: str) -> pd.DataFrame:
    return frame[frame.kind == kind]


# -- crafted trainings -------------------------------------------------------------------
class BackwardPoison(nn.Module):
    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.step = at, 0

    def forward(self, x):
        return NanGradient.apply(x) if self.step == self.at else x


# -- nonfinite ---------------------------------------------------------------------------
def test_nan_off_the_cadence_names_module_step_and_type(tmp_path):
    poison = Poison({7})
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), poison, nn.Linear(8, 1))
    train(model, tmp_path, 12, every=5, before_step=set_step(poison))
    frame = per_tensor(tmp_path)
    first = only(frame, "nonfinite")
    assert len(first) == 1
    row = first.iloc[0]
    assert (row.step, row.tensor_type, row["name"], row.severity) == (7, "Activation", "1", "error")
    assert row.value == 3
    assert "step 7" in row.message and "'1'" in row.message and "3 NaN" in row.message

    status, listed = cli_json(tmp_path, "--all")
    assert status == 1  # an error exists: a pipeline stops here
    nonfinite = [f for f in listed if f["kind"] == "nonfinite"]
    assert [(f["step"], f["tensor_type"], f["name"]) for f in nonfinite] == [(7, "Activation", "1")]
    assert all(list(f) == list(COLUMNS) for f in listed)
    # grouped (the default): the same findings, each in one group, with its count
    status, groups = cli_json(tmp_path)
    assert status == 1
    assert all(list(g) == [*GROUP_COLUMNS, "findings"] for g in groups)
    assert sorted(json.dumps(f) for g in groups for f in g["findings"]) == sorted(
        json.dumps(f) for f in listed
    )
    check_groups(groups, listed)
    (nan_group,) = [g for g in groups if g["kind"] == "nonfinite"]
    assert (nan_group["step"], nan_group["name"]) == (7, "1")
    # the NaN spreads to the tensors after it: the row stands for every one of them
    assert f"; {nan_group['tensors'] - 1} more tensors after it" in nan_group["message"]
    text = cli("findings", str(tmp_path)).stdout.splitlines()
    assert text[0].startswith(".  ") and "first NaN/Inf of the run at step 7" in text[0]


@pytest.mark.parametrize("watch", [True, False], ids=["watch", "records"])
def test_nan_born_in_backward_names_the_gradient(tmp_path, watch):
    """With the watch (every step) or, without it, from the recorded counts in execution
    order: the gradient the NaN was born in, not the weight gradients after it."""
    poison = BackwardPoison(at=4)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), poison, nn.Linear(8, 1))
    train(model, tmp_path, 6, before_step=set_step(poison), watch_nonfinite=watch)
    frame = per_tensor(tmp_path)
    row = only(frame, "nonfinite").iloc[0]
    assert (row.step, row.tensor_type, row["name"]) == (4, "Gradient", "0")


# -- low-precision formats -----------------------------------------------------------------
def test_learning_rate_makes_float8_e4m3fn_overflow_from_a_known_step(tmp_path):
    """Maximising the output's square with a big learning rate doubles the weights, and so
    the output, about every step; the step where the output first overflows comes from
    ml_dtypes."""
    torch.manual_seed(0)
    model = nn.Linear(8, 1, bias=False)
    outputs = []
    model.register_forward_hook(lambda m, i, out: outputs.append(out.detach().numpy().copy()))
    train(
        model,
        tmp_path,
        14,
        lr=0.5,
        loss_fn=lambda out, s: -out.pow(2).mean(),
        formats=("float8_e4m3fn",),
    )
    casts = [np.isnan(o.astype(ml_dtypes.float8_e4m3fn).astype(np.float32)) for o in outputs]
    expected = next(step for step, nan in enumerate(casts) if nan.any())
    assert 0 < expected < 13  # the crafted training does what it is meant to
    share = casts[expected].mean()

    frame = per_tensor(tmp_path)
    over = only(frame, "overflow")
    first = over[over.step == over.step.min()].iloc[0]
    assert first.step == expected
    assert (first.tensor_type, first["name"]) == ("Activation", "Linear")
    assert first.value == pytest.approx(share)
    assert first.severity == ("error" if share > 1e-3 else "warning")
    assert "float8_e4m3fn" in first.message

    status, listed = cli_json(tmp_path, "--fail-on", "error")
    assert status == 1
    assert min(f["step"] for f in listed if f["kind"] == "overflow") == expected
    headline = cli("findings", str(tmp_path)).stdout.splitlines()[0]
    assert f"float8_e4m3fn overflows from step {expected}" in headline
    # one overflow finding per tensor and severity, grouped by tensor type
    assert not over.duplicated(["tensor_type", "name", "severity"]).any()
    _, every = cli_json(tmp_path, "--all")
    check_groups(listed, every)


def test_gradient_underflows_in_float8_e5m2_and_a_scale_fixes_it(tmp_path):
    """A loss scaled by 1e-9 makes the gradients far smaller than float8_e5m2's smallest
    subnormal; the suggested 2**k, applied to the real gradient, casts with little loss."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    grads = []

    def keep_gradient(module, inputs, out) -> None:  # the gradient of layer 0's output
        out.register_hook(lambda g: grads.append(g.numpy().copy()))

    model[0].register_forward_hook(keep_gradient)
    train(
        model,
        tmp_path,
        6,
        loss_fn=lambda out, s: 1e-9 * out.pow(2).mean(),
        formats=("float8_e5m2",),
    )

    frame = per_tensor(tmp_path)
    under = only(frame, "underflow").set_index(["tensor_type", "name"])
    assert under.loc[("Gradient", "0"), "step"] == 0
    assert under.loc[("Gradient", "0"), "value"] > 0.9
    scale = only(frame, "scale").set_index(["tensor_type", "name"]).loc[("Gradient", "0")]
    k = int(scale.value)
    assert k > 10 and f"x 2^{k}" in scale.message and "float8_e5m2" in scale.message

    def underflow_share(values: np.ndarray) -> float:
        nonzero = values[values != 0]
        return float((nonzero.astype(ml_dtypes.float8_e5m2) == 0).mean())

    assert min(underflow_share(g) for g in grads) > 0.9
    assert max(underflow_share(g * 2.0**k) for g in grads) < 0.05  # the scale fixes it

    # grouped: one underflow row per tensor type, the scales of its tensors in its
    # sentence, and one scale row per tensor type beside it
    grouped = tandv_tb.findings(tmp_path, cache_dir=tmp_path.parent / "cache")
    scales = only(frame, "scale").set_index(["tensor_type", "name"])
    types = under.index.get_level_values("tensor_type")
    assert sorted(only(grouped, "underflow").tensor_type) == sorted(set(types))
    for row in only(grouped, "underflow").itertuples():
        mine = under.xs(row.tensor_type, level="tensor_type")
        assert row.tensors == len(mine) and row.step == mine.step.min()
        assert row.message.startswith(f"float8_e5m2: {len(mine)} of ")
        assert f" {row.tensor_type} tensors would lose over 5% " in row.message
        ks = scales.xs(row.tensor_type, level="tensor_type").value.astype(int)
        assert f"scale of {power_range(ks)} brings" in row.message
    scale_rows = only(grouped, "scale")
    assert sorted(scale_rows.tensor_type) == sorted(set(types))
    assert scale_rows.tensors.sum() == len(scales)
    # printed: the underflow of the format and its scales folded into one line, with the
    # numbers of every tensor; underflow is what an unscaled float8 does, not the headline
    lines = cli("findings", str(tmp_path)).stdout.splitlines()
    assert "no problem found" in lines[0]
    (line,) = [line for line in lines if " underflow " in line]
    assert f"float8_e5m2 without a scale (expected): {len(under)} of " in line
    assert f"scale of {power_range(scales.value.astype(int))} brings" in line
    assert "scale" not in map(kind_of, lines)  # folded with what they remedy
    listed = cli("findings", str(tmp_path), "--groups").stdout.splitlines()
    assert list(map(kind_of, listed)).count("underflow") == len(set(types))
    assert list(map(kind_of, listed)).count("scale") == len(set(types))


def kind_of(line: str) -> str:
    """The KIND column of a line of the grouped table (of a run named without spaces)."""
    columns = line.split()
    return columns[3] if len(columns) > 4 and columns[2].isdigit() else ""


# -- trends --------------------------------------------------------------------------------
def test_dead_relu_layer(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    with torch.no_grad():
        model[0].bias.fill_(-100.0)  # every pre-activation negative: the ReLU is dead
    train(model, tmp_path, 8)
    frame = per_tensor(tmp_path)
    dead = only(frame, "dead").set_index(["tensor_type", "name"])
    assert dead.loc[("Activation", "1"), "step"] == 0
    assert dead.loc[("Activation", "1"), "value"] == 8
    assert ("Activation", "0") not in dead.index
    longer = per_tensor(tmp_path, dead_window=9)
    assert only(longer, "dead").empty  # 8 steps are not a window of 9
    assert only(frame, "loss_spike").empty  # no loss scalar: no spike, no error


def test_loss_spike_linked_to_the_first_drift_before_it(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    train(
        model,
        tmp_path,
        40,
        scalars=True,
        loss_fn=lambda out, s: out.pow(2).mean() * (1e4 if s == 30 else 1.0),
    )
    frame = per_tensor(tmp_path)
    spikes = only(frame, "loss_spike")
    assert list(spikes.step) == [30]
    drifts = only(frame, "drift")
    assert 30 in set(drifts.step)
    # the loss's gradient jumps first in the backward pass: the model's output
    assert (spikes.iloc[0].tensor_type, spikes.iloc[0]["name"]) == ("Gradient", "Sequential")


# -- divergence ----------------------------------------------------------------------------
def test_runs_identical_until_weights_perturbed_diverge_at_that_step(tmp_path):
    k = 9

    def run(name: str, perturb: bool) -> None:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))

        def before(step):
            if perturb and step == k:
                with torch.no_grad():
                    model[2].weight.mul_(8.0)

        train(model, tmp_path / name, 15, before_step=before)

    run("a", False)
    run("b", True)
    frame = per_tensor(tmp_path)
    parted = only(frame, "divergence")
    assert len(parted) == 1
    row = parted.iloc[0]
    assert (row.run, row.step, row.severity) == ("a", k, "warning")
    # the first tensor of step k in execution order that differs: layer 2's output
    assert (row.tensor_type, row["name"]) == ("Activation", "2")
    assert row.value == pytest.approx(-3.0, abs=0.5)  # log2 rm2: a times 8 is 3 binades
    assert "'b'" in row.message
    tolerant = per_tensor(tmp_path, divergence_threshold=7.0)
    assert only(tolerant, "divergence").empty  # the largest difference: 64x, 6 binades
    by_max = per_tensor(tmp_path, divergence_metric="log2_max_abs")
    assert list(only(by_max, "divergence").step) == [k]
    alone = per_tensor(tmp_path, run="a")
    assert only(alone, "divergence").empty

    status, listed = cli_json(tmp_path, "--fail-on", "warning")
    assert status == 1
    assert [(f["run"], f["step"]) for f in listed if f["kind"] == "divergence"] == [("a", k)]
    done = cli("findings", str(tmp_path), "--run", "b")
    assert done.returncode == 0, done.stderr  # warnings only: not at or above "error"
    assert "divergence" not in done.stdout


# -- bad input -----------------------------------------------------------------------------
def test_no_numerics_no_findings(tmp_path):
    with SummaryWriter(str(tmp_path / "scalars_only")) as writer:
        writer.add_scalar("loss", 1.0, 0)
    frame = per_tensor(tmp_path)
    assert list(frame.columns) == list(COLUMNS) and frame.empty
    assert frame.dtypes["step"] == np.int64 and frame.dtypes["value"] == np.float64
    grouped = tandv_tb.findings(tmp_path, cache_dir=tmp_path.parent / "cache")
    assert list(grouped.columns) == list(GROUP_COLUMNS) and grouped.empty
    assert grouped.dtypes["tensors"] == np.int64
    status, listed = cli_json(tmp_path, "--fail-on", "info")
    assert (status, listed) == (0, [])
    done = cli("findings", str(tmp_path))
    assert (done.returncode, done.stdout.strip()) == (0, "scalars_only  no problem found")
    (tmp_path / "scalars_only").rename(tmp_path.parent / "elsewhere")
    done = cli("findings", str(tmp_path))
    assert (done.returncode, done.stdout.strip()) == (0, "no findings")  # no run at all


@pytest.mark.parametrize(
    "args",
    [
        ("findings", "{missing}"),
        ("findings", "{logdir}", "--bogus"),
        ("findings", "{logdir}", "--fail-on", "fatal"),
        ("findings", "{logdir}", "--run", "nope"),
        ("findings", "{logdir}", "--compare", "a"),
        ("findings", "{logdir}", "--compare", "a", "a"),
        ("findings", "{logdir}", "--compare", "a", "b", "--run", "a"),
        ("findings", "{logdir}", "--groups", "--all"),
        ("findings",),
        (),
    ],
)
def test_bad_arguments_exit_2_with_one_line(tmp_path, args):
    (tmp_path / "logdir").mkdir()
    values = {"missing": str(tmp_path / "missing"), "logdir": str(tmp_path / "logdir")}
    done = cli(*(a.format(**values) for a in args))
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr


def test_python_api_refuses_bad_input(tmp_path):
    with pytest.raises(FileNotFoundError):
        tandv_tb.findings(tmp_path / "missing")
    tmp_path.joinpath("empty").mkdir()
    with pytest.raises(ValueError, match="no run"):
        tandv_tb.findings(tmp_path / "empty", run="nope", cache_dir=tmp_path / "cache")
    with pytest.raises(ValueError, match="underflow_share"):
        tandv_tb.findings(tmp_path / "empty", underflow_share=-1, cache_dir=tmp_path / "cache")
    with pytest.raises(ValueError, match="divergence metric"):
        tandv_tb.findings(
            tmp_path / "empty", divergence_metric="bogus", cache_dir=tmp_path / "cache"
        )


HOSTILE = "<script>alert(1)</script>\nnext line\x1b[2J\u202eevil\t"


def test_hostile_names_are_text(tmp_path):
    with NumericsWriter(str(tmp_path / "run\nx<b>")) as writer:
        for step in range(3):
            values = np.ones(16, dtype=np.float32)
            if step == 1:
                values[:2] = np.nan
            writer.add_numerics(HOSTILE, values, step)
    frame = per_tensor(tmp_path)
    row = only(frame, "nonfinite").iloc[0]
    assert (row.run, row["name"], row.step) == ("run\nx<b>", HOSTILE, 1)
    status, listed = cli_json(tmp_path)
    assert status == 1 and listed[0]["name"] == HOSTILE and listed[0]["run"] == "run\nx<b>"
    done = cli("findings", str(tmp_path))
    lines = done.stdout.splitlines()
    # the headline, a blank line, the header and the one finding: nothing broke a line
    assert len(lines) == 4 and lines[1] == ""
    assert "\x1b" not in done.stdout and "\u202e" not in done.stdout
    assert all("\\n" in lines[i] and "<script>" in lines[i] for i in (0, 3))


def test_import_tandv_tb_loads_neither_duckdb_nor_the_engine():
    loaded = "any(m in sys.modules for m in ('duckdb', 'tandv_tb.diagnosis'))"
    code = f"import sys, tandv_tb; print({loaded})"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.stdout.strip() == "False", done.stderr
    assert callable(tandv_tb.findings)
