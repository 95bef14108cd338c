"""Two ranks (``torchrun --nproc_per_node=2``, gloo): tensor parallelism (DTensor's
``parallelize_module``) and pipeline parallelism (``torch.distributed.pipelining``), each
against the same model trained on one process.

The test runs this file under torchrun; its ``__main__`` part is the training both ranks
run, each parallel training twice (tracked, and untracked to compare), saving what each
rank saw for the test to check.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from tandv_tb.event_files.nonfinite import read_nonfinite
from tandv_tb.torch import track
from tandv_tb.torch.parallel_layout import UntoldLayoutWarning
from tests.helpers.parallel_training import (
    HIDDEN,
    SHARDED,
    STEPS,
    WIDTH,
    assert_same_training,
    check_against_one_process,
    four_layers,
    loss_of,
    stage_module,
    tp_plan,
    train,
    train_one_process,
    two_blocks,
)
from tests.helpers.torch_models import assert_same, expected, read_records
from tests.helpers.torchrun import run_ranks

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

#: Weights of both pipeline stages, in the model's order.
WEIGHTS = ("0.weight", "2.weight", "4.weight", "6.weight")


def _tensor_parallel(logdir: str | None, declared: bool, nan_at: int | None = None) -> dict:
    """The two blocks, ``ColwiseParallel`` then ``RowwiseParallel``; tracked into ``logdir``
    (None: untracked); ``declared``: with the layout of ``act``'s outputs given; ``nan_at``:
    a step whose first input row is NaN, the first step alone tracked (the watch's)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import parallelize_module

    mesh = init_device_mesh("cpu", (2,))
    model = parallelize_module(two_blocks(), mesh, tp_plan())
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    declaring = {"layouts": {r"\.act$": Shard(-1)}, "mesh": mesh} if declared else {}
    tracker = None
    if logdir is not None:
        every = 1 if nan_at is None else 10
        tracker = track(model, logdir=logdir, optimizer=optimizer, every=every, **declaring)
    steps = iter(range(STEPS))

    def step_fn(x, y):
        if next(steps) == nan_at:
            x[0] = float("nan")
        loss = loss_of(model(x), y)
        loss.backward()
        return loss

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UntoldLayoutWarning)
        losses, steps = train(model, optimizer, tracker, step_fn)
    untold = [str(w.message) for w in caught if issubclass(w.category, UntoldLayoutWarning)]
    return {"steps": steps, "losses": losses, "untold": untold}


def _pipeline(logdir: str | None) -> dict:
    """``four_layers`` in two stages, one per rank, 4 microbatches (GPipe); each stage
    infers its shapes at the first step (no ``input_args``)."""
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    rank = dist.get_rank()
    module = stage_module(four_layers(), rank)
    stage = PipelineStage(module, rank, 2, torch.device("cpu"))
    schedule = ScheduleGPipe(stage, n_microbatches=4, loss_fn=loss_of, scale_grads=False)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9)
    tracker = None if logdir is None else track(stage, logdir=logdir, optimizer=optimizer)

    def step_fn(x, y):
        if rank == 0:
            schedule.step(x)
            return None
        losses = []
        schedule.step(target=y, losses=losses)
        return torch.stack(losses).sum()

    # stage 0's output is no output of the model
    losses, steps = train(module, optimizer, tracker, step_fn, skip_root=rank == 0)
    # Inferring its shapes, the stage ran its module once more at the first step on
    # stand-ins, forward, and backward where its inputs need gradients (not on the first
    # stage): the first of those calls, which the tracker passes over.
    inferred = ("Activation", "Gradient") if rank > 0 else ("Activation",)
    steps[0] = {k: v[1:] if k[0] in inferred else v for k, v in steps[0].items()}
    return {"steps": steps, "losses": losses}


def _bad_input() -> list[str]:
    """``track``'s errors for a mesh or group that does not match the model (rank 0)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Partial, Shard
    from torch.distributed.tensor.parallel import parallelize_module

    mesh = init_device_mesh("cpu", (2,))
    other = init_device_mesh("cpu", (2, 1))
    alone = dist.new_group([0])
    model = parallelize_module(two_blocks(), mesh, tp_plan())
    errors = []
    if dist.get_rank() == 0:
        for kwargs in (
            {"layouts": {"act": (Shard(-1), Shard(0))}, "mesh": other},  # not the model's
            {"layouts": {"act": (Shard(-1), Shard(0))}, "mesh": mesh},  # 2 for 1 dimension
            {"layouts": {"act": Partial()}, "mesh": mesh},
            {"layouts": {"act": Shard(-1)}},  # no mesh
            {"process_group": alone},  # leaves rank 1's shards out
        ):
            with pytest.raises((ValueError, TypeError)) as error:
                track(model, logdir=os.devnull, **kwargs)
            errors.append(str(error.value))
    return errors


def main(logdir: str) -> None:
    dist.init_process_group("gloo")
    saved = {
        "tp": _tensor_parallel(f"{logdir}/tp", declared=True),
        "tp_untracked": _tensor_parallel(None, declared=True),
        "tp_untold": _tensor_parallel(f"{logdir}/tp_untold", declared=False),
        "tp_watch": _tensor_parallel(f"{logdir}/tp_watch", declared=True, nan_at=1),
        "pp": _pipeline(f"{logdir}/pp"),
        "pp_untracked": _pipeline(None),
        "bad": _bad_input(),
    }
    torch.save(saved, f"{logdir}/rank{dist.get_rank()}.pt")
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> tuple[Path, list[dict]]:
    logdir = tmp_path_factory.mktemp("ranks")
    return logdir, run_ranks(__file__, logdir, 2)


def _tp_wholes(ranks: list[dict], run: str) -> list[dict]:
    """Each tensor the tensor-parallel ranks held, per step, whole: shards joined, replicas
    once."""
    steps = []
    for held, other_held in zip(ranks[0][run]["steps"], ranks[1][run]["steps"]):
        wholes = {}
        for key, local in held.items():
            other = other_held[key]
            if key[0] in ("Activation", "Gradient") and key[1].endswith(SHARDED):
                wholes[key] = [torch.cat(pair, dim=-1) for pair in zip(local, other)]
            else:
                assert all(map(torch.equal, local, other)), key  # replicas
                wholes[key] = local
        steps.append(wholes)
    return steps


def test_tensor_parallel_records_are_the_full_tensors_counted_once(two_ranks, tmp_path):
    logdir, ranks = two_ranks
    one_process = two_blocks()
    optimizer = torch.optim.AdamW(one_process.parameters(), lr=0.01)
    seen = train_one_process(str(tmp_path), one_process, optimizer, track)
    same = check_against_one_process(
        str(logdir / "tp"), str(tmp_path), _tp_wholes(ranks, "tp"), seen
    )
    assert same > 0  # some tensors hold the same data as on one process: counted exactly
    records = read_records(str(logdir / "tp"))
    assert records["blocks.0.fc2", "Activation", 1].record.numel == 8 * 8  # not twice
    assert not ranks[0]["tp"]["untold"] and not (logdir / "tp" / "rank0").exists()


def test_tracking_leaves_parallel_training_bitwise_unchanged(two_ranks):
    _, ranks = two_ranks
    for rank in ranks:
        for run in ("tp", "pp"):
            assert_same_training(rank[run], rank[f"{run}_untracked"], run)


def test_the_watch_counts_a_tensor_parallel_nan_once_over_the_full_tensor(two_ranks):
    logdir, _ = two_ranks
    (found,) = read_nonfinite(logdir / "tp_watch")  # step 1, untracked: the watch's
    nan = {(e.tensor_type, e.name): e.nan for e in found.entries}
    assert found.step == 1
    assert nan["Activation", "blocks.0.fc1"] == HIDDEN  # both shards of the NaN row
    assert nan["Activation", "blocks.0.fc2"] == WIDTH  # one replica of it
    assert nan["Activation", "TwoBlocks"] == WIDTH


def test_a_layout_nothing_tells_is_recorded_per_rank_with_one_warning(two_ranks):
    logdir, ranks = two_ranks
    merged = read_records(str(logdir / "tp_untold"))
    assert not any(name.endswith(".act") for name, _, _ in merged)
    assert ("blocks.0.fc1", "Activation", 1) in merged  # told by its DTensor: whole
    for k, rank in enumerate(ranks):
        apart = read_records(str(logdir / "tp_untold" / f"rank{k}"))
        assert {name for name, _, _ in apart} == {"blocks.0.act", "blocks.1.act"}
        for tensor_type in ("Activation", "Gradient"):
            want = expected(rank["tp_untold"]["steps"][1][tensor_type, "blocks.1.act"])
            assert_same(apart["blocks.1.act", tensor_type, 1].record, want)
    untold = ranks[0]["tp_untold"]["untold"]
    assert len(untold) == 2 and all("layouts=" in message for message in untold)
    assert {m.split("'")[1] for m in untold} == {"blocks.0.act", "blocks.1.act"}
    assert not ranks[1]["tp_untold"]["untold"]  # rank 0 writes, and warns


def test_pipeline_stages_records_reach_the_run_as_in_the_whole_model(two_ranks, tmp_path):
    logdir, ranks = two_ranks
    one_process = four_layers()
    optimizer = torch.optim.SGD(one_process.parameters(), lr=0.1, momentum=0.9)
    seen = train_one_process(str(tmp_path), one_process, optimizer, track)
    wholes = [{**a, **b} for a, b in zip(ranks[0]["pp"]["steps"], ranks[1]["pp"]["steps"])]
    assert len(wholes[0]["Activation", "0"]) == 4  # the microbatches, merged in one record
    same = check_against_one_process(str(logdir / "pp"), str(tmp_path), wholes, seen)
    assert same > 0  # some tensors hold the same data as on one process: counted exactly
    records = read_records(str(logdir / "pp"))  # stage 1's tensors after stage 0's
    for tensor_type, names in (("Activation", ("3", "4", "Sequential")), ("Weight", WEIGHTS)):
        orders = [records[name, tensor_type, 0].order for name in names]
        assert orders == sorted(orders), (tensor_type, orders)


def test_a_mesh_or_group_that_does_not_match_the_model_is_refused_at_track(two_ranks):
    _, ranks = two_ranks
    errors = ranks[0]["bad"]
    assert "does not match the model's placements" in errors[0]
    assert "has 2 placements for a mesh of 1 dimensions" in errors[1]
    assert "partial sums" in errors[2]
    assert "layouts needs mesh" in errors[3]
    assert "would be missing from every record" in errors[4]


if __name__ == "__main__":
    main(sys.argv[1])
