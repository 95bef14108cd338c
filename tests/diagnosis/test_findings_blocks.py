"""Findings of the block-scaled formats, read from the store, on a crafted run whose fate
in ``mxfp4_e2m1`` is known tensor by tensor (``tests/helpers/block_runs.py``): which
tensors underflow, saturate and clamp, with the shares the engine records; overflow never
for ``:rceil`` and never an error; grouped like the element formats; never a headline, and
folded into one line per run for all its block formats in the default view, on the
command line and in the plugin's route."""

from __future__ import annotations

import numpy as np
import pytest

import tandv_tb
from tandv_tb.diagnosis import find
from tandv_tb.diagnosis.base import Thresholds, percent
from tandv_tb.diagnosis.folding import Fold
from tandv_tb.stats import tensor_stats
from tandv_tb.writer import NumericsWriter
from tests.helpers.block_runs import (
    ACTIVATIONS,
    BLOCKS,
    FORMATS,
    STEPS,
    tensor,
    write_block_run,
)
from tests.helpers.findings_cli import cli, cli_json
from tests.helpers.findings_groups import check_groups, format_named
from tests.helpers.plugin import TensorBoardProcess

MX = "mxfp4_e2m1"


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("block_findings")
    write_block_run(root / "logs" / "blocks")
    return root / "logs"


@pytest.fixture(scope="module")
def every(logdir):
    return tandv_tb.findings(logdir, grouped=False, cache_dir=logdir.parent / "cache")


def _values(name: str, tensor_type: str, step: int):
    values = tensor(name, step)
    return values * 1e-3 if tensor_type == "Gradient" else values


def _record(name: str, tensor_type: str, step: int):
    return tensor_stats(_values(name, tensor_type, step), FORMATS).to_record()


def _of(every, kind: str, format_name: str) -> dict[tuple[str, str], object]:
    """The findings of ``kind`` in ``format_name``, by tensor."""
    rows = every[every.kind == kind]
    return {
        (r.tensor_type, r.name): r
        for r in rows.itertuples()
        if format_named(r.message) == format_name
    }


def test_which_tensors_underflow_saturate_and_clamp(every):
    under = _of(every, "underflow", MX)
    assert set(under) == {
        ("Activation", "spiky"),
        ("Activation", "tiny"),
        ("Activation", "normal"),
        ("Gradient", "normal"),
    }
    for (tensor_type, name), row in under.items():
        record = _record(name, tensor_type, 0)
        nonzero = record.finite_count - record.zero_count
        assert row.step == 0 and row.severity == "warning"
        assert row.value == pytest.approx(record.blocks[MX].underflow / nonzero)
    saturating = _of(every, "overflow", MX)
    assert set(saturating) == {
        ("Activation", "saturating"),
        ("Activation", "normal"),
        ("Gradient", "normal"),
    }
    assert saturating[("Activation", "saturating")].value == 1.0
    assert {row.severity for row in saturating.values()} == {"warning"}  # even at 100%
    assert "saturates from step 0" in saturating[("Activation", "saturating")].message
    clamped = _of(every, "scale", MX)
    assert list(clamped) == [("Activation", "tiny")]
    tiny = clamped[("Activation", "tiny")]
    assert (tiny.value, tiny.severity) == (1.0, "warning")
    assert "below 2^-127" in tiny.message
    # nothing saturates under the round-up rule; nvfp4 neither (its scale rounds to nearest)
    rceil = every[every.message.str.contains(":rceil", regex=False)]
    assert "overflow" not in set(rceil.kind)
    assert "overflow" not in set(_of(every, "overflow", "nvfp4"))
    # a block format suggests no per-tensor scale
    infos = every[(every.kind == "scale") & (every.severity == "info")]
    assert all("float8_e4m3fn" in m for m in infos.message)


def test_a_later_start_agrees_with_the_crafted_counts_at_every_step(logdir, every):
    """The share of each finding at its tensor's last step, as its sentence gives it."""
    for (tensor_type, name), row in _of(every, "underflow", MX).items():
        last = _record(name, tensor_type, STEPS[-1])
        nonzero = last.finite_count - last.zero_count
        share = percent(last.blocks[MX].underflow / nonzero)
        assert row.message.endswith(f"({share} at step {STEPS[-1]})"), row.message


def blocks_of(fold: Fold) -> dict[str, list]:
    """The groups of a fold by format, in the fold's order."""
    by_format: dict[str, list] = {}
    for g in fold.groups:
        by_format.setdefault(g.format, []).append(g)
    return by_format


def test_block_findings_are_grouped_never_a_headline_and_folded(logdir):
    found = find(logdir, cache_dir=logdir.parent / "cache", thresholds=Thresholds())
    (headline,) = found.headlines
    assert headline.finding is None  # block findings (and fp8 underflow) only
    status, groups = cli_json(logdir)
    _, listed = cli_json(logdir, "--all")
    assert status == 0  # warnings: the default --fail-on error passes
    check_groups(groups, listed)
    overflow = [g for g in groups if g["kind"] == "overflow" and g["message"].startswith(MX)]
    assert sorted((g["tensor_type"], g["tensors"]) for g in overflow) == [
        ("Activation", 2),
        ("Gradient", 1),
    ]
    folds = [row for row in found.view if isinstance(row, Fold)]
    blocks = folds[1]
    assert [fold.format for fold in folds] == ["float8_e4m3fn", ", ".join(blocks_of(blocks))]
    by_format = blocks_of(blocks)
    # every block format's groups, a lone one too (mxfp8_e4m3:rceil clamps, nothing else)
    assert set(by_format) == {MX, f"{MX}:rceil", "nvfp4", "mxfp8_e4m3:rceil"}
    assert {g.kind for g in by_format[MX]} == {"underflow", "overflow", "scale"}
    assert [g.kind for g in by_format["mxfp8_e4m3:rceil"]] == ["scale"]
    assert len(blocks.groups) == len([g for g in groups if format_named(g["message"]) in by_format])
    # every tensor with a block finding: spiky, tiny, saturating, normal and the Gradient
    assert blocks.tensors == 5
    names = ", ".join(by_format)
    names = names[: names.rindex(", ")] + " and " + names[names.rindex(", ") + 2 :]
    assert blocks.message.startswith(
        f"{names}, block-scaled (what they would lose): {MX}: 4 of 6 tensors"
    )
    mx = blocks.message[blocks.message.index(f"{MX}: ") : blocks.message.index(f"; {MX}:rceil: ")]
    assert "3 tensors round values down to their block's largest element value" in mx
    assert f"{MX}:rceil saturates none" in mx
    assert "1 tensor has blocks whose scale clamps" in mx
    assert "; mxfp8_e4m3:rceil: 1 tensor has blocks whose scale clamps" in blocks.message
    kinds = [g.kind for g in blocks.groups]
    counts = " and ".join(
        f"{kinds.count(k)} {k}" for k in ("underflow", "overflow", "scale") if k in kinds
    )
    assert blocks.message.endswith(f"; {counts} groups, one per tensor type")
    printed = cli("findings", str(logdir)).stdout.splitlines()
    assert printed[0].split(maxsplit=1) == ["blocks", "no problem found"]
    assert sum(", block-scaled (what they would lose): " in line for line in printed) == 1
    assert not [line for line in printed if "(what it would lose)" in line]


def test_a_run_of_one_block_format_folds_into_its_sentence(tmp_path):
    with NumericsWriter(str(tmp_path / "logs" / "one"), formats=(MX,)) as writer:
        for step in STEPS:
            for name in ACTIVATIONS:
                writer.add_numerics(name, tensor(name, step), step)
    found = find(tmp_path / "logs", cache_dir=tmp_path / "cache")
    (fold,) = [row for row in found.view if isinstance(row, Fold)]
    assert fold.format == MX and {g.kind for g in fold.groups} == {"underflow", "overflow", "scale"}
    assert fold.message.startswith(f"{MX}, block-scaled (what it would lose): 3 of 5 Activation")
    assert "; 1 tensor has blocks whose scale clamps from step 0 (median 100%); " in fold.message


def test_the_route_shows_where_a_block_finding_is(logdir):
    server = TensorBoardProcess(logdir, "false")
    try:
        body = server.wait(
            lambda: server.json("/data/plugin/tandv/findings?run=blocks"), "the findings route"
        )
    finally:
        server.close()
    assert body["headlines"] == [{"run": "blocks", "message": "no problem found", "finding": None}]
    shown = {(f["kind"], f["format"], f["name"]): f for f in body["findings"]}
    assert shown[("scale", MX, "tiny")]["metric"] == "clamped_block_fraction"
    assert shown[("underflow", MX, "spiky")]["metric"] == "underflow_fraction"
    assert shown[("overflow", MX, "saturating")]["metric"] == "overflow_fraction"
    grouped = [body["groups"][i] for i in body["folds"][1]["groups"]]
    formats = ", ".join(
        dict.fromkeys(body["findings"][g["findings"][0]]["format"] for g in grouped)
    )
    assert [f["format"] for f in body["folds"]] == ["float8_e4m3fn", formats]
    assert {g["kind"] for g in grouped} == {"underflow", "overflow", "scale"}
    assert set(formats.split(", ")) == {MX, f"{MX}:rceil", "nvfp4", "mxfp8_e4m3:rceil"}
    assert set(BLOCKS) >= {f["format"] for f in body["findings"] if f["format"] != "float8_e4m3fn"}


def test_nvfp4_scales_over_448_by_float32_rounding_are_no_finding(tmp_path):
    """A bias of 4 blocks whose largest value (1.0000004) gets the nvfp4 scale one float32
    ulp over 448: the record counts that block clamped high, as torchao's clamp takes it
    back to 448; nothing is lost, and the findings say nothing of it."""
    values = np.full(64, 0.5, np.float32)
    values[0] = np.float32(1.0000004)
    assert tensor_stats(values, ("nvfp4",)).blocks["nvfp4"].clamped_high == 1
    with NumericsWriter(str(tmp_path / "logs" / "run"), formats=("nvfp4",)) as writer:
        for step in range(12):
            writer.add_numerics("bias", values, step)
    found = tandv_tb.findings(tmp_path / "logs", grouped=False, cache_dir=tmp_path / "cache")
    assert "scale" not in set(found.kind)
