"""Four ranks (``torchrun --nproc_per_node=4``, gloo) on a 2 x 2 device mesh: FSDP2
(``fully_shard``) over ``dp`` and tensor parallelism over ``tp``, against the same model
trained on one process with the global batch.

The test runs this file under torchrun; its ``__main__`` part is the training the ranks
run, tracked and untracked, saving what each rank saw for the test to check.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from tandv_tb.torch import track
from tests.helpers.parallel_training import (
    ROWS,
    SHARDED,
    assert_same_training,
    check_against_one_process,
    loss_of,
    tp_plan,
    train,
    train_one_process,
    two_blocks,
)
from tests.helpers.torch_models import read_records
from tests.helpers.torchrun import run_ranks

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


class CountedSteps:
    """A tracker whose ``step()`` counts the collectives it runs."""

    def __init__(self, tracker) -> None:
        self.tracker = tracker
        self.collectives: list[int] = []

    def step(self) -> None:
        calls = []
        originals = {name: getattr(dist, name) for name in ("all_reduce", "all_gather_object")}

        def counted(call):
            return lambda *args, **kwargs: calls.append(1) or call(*args, **kwargs)

        for name, call in originals.items():
            setattr(dist, name, counted(call))
        try:
            self.tracker.step()
        finally:
            for name, call in originals.items():
                setattr(dist, name, call)
        self.collectives.append(len(calls))

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.tracker.__exit__(*exc_info)


def _two_dimensional(logdir: str | None) -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import parallelize_module

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    model = parallelize_module(two_blocks(), mesh["tp"], tp_plan())
    for block in model.blocks:
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    tracker = None
    if logdir is not None:
        layouts = {r"\.act$": Shard(-1)}
        tracker = CountedSteps(
            track(model, logdir=logdir, optimizer=optimizer, layouts=layouts, mesh=mesh["tp"])
        )
    group = mesh.get_coordinate()[0]  # which half of the global batch the dp group takes
    share = slice(group * ROWS // 2, (group + 1) * ROWS // 2)

    def step_fn(x, y):
        loss = loss_of(model(x[share]), y[share])
        loss.backward()
        for parameter in model.parameters():  # FSDP averaged the dp groups' gradients:
            parameter.grad.mul_(2)  # their sum, exactly (gloo cannot sum them itself)
        return loss

    losses, steps = train(model, optimizer, tracker, step_fn)
    return {
        "steps": steps,
        "losses": losses,
        "collectives": [] if tracker is None else tracker.collectives,
    }


def main(logdir: str) -> None:
    dist.init_process_group("gloo")
    saved = {"2d": _two_dimensional(f"{logdir}/2d"), "untracked": _two_dimensional(None)}
    torch.save(saved, f"{logdir}/rank{dist.get_rank()}.pt")
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory) -> tuple[Path, list[dict]]:
    logdir = tmp_path_factory.mktemp("ranks")
    return logdir, run_ranks(__file__, logdir, 4)


def _wholes(ranks: list[dict]) -> list[dict]:
    """Each tensor the ranks held, per step, whole: within a ``dp`` group (ranks 2g, 2g+1)
    the ``tp`` shards joined or one replica, then the groups' rows in order."""
    steps = []
    for step in range(len(ranks[0]["2d"]["steps"])):
        held = [rank["2d"]["steps"][step] for rank in ranks]
        wholes = {}
        for key, local in held[0].items():
            if key[0] not in ("Activation", "Gradient"):
                wholes[key] = local  # a parameter's full tensor, on every rank
                continue
            groups = []
            for first, second in ((held[0][key], held[1][key]), (held[2][key], held[3][key])):
                if key[1].endswith(SHARDED):
                    groups.append([torch.cat(pair, dim=-1) for pair in zip(first, second)])
                else:
                    assert all(map(torch.equal, first, second)), key  # replicas
                    groups.append(first)
            wholes[key] = [torch.cat(calls) for calls in zip(*groups)]
        steps.append(wholes)
    return steps


def test_fsdp_and_tensor_parallel_records_are_the_full_tensors_over_the_global_batch(
    four_ranks, tmp_path
):
    logdir, ranks = four_ranks
    one_process = two_blocks()
    optimizer = torch.optim.AdamW(one_process.parameters(), lr=0.01)
    seen = train_one_process(str(tmp_path), one_process, optimizer, track)
    same = check_against_one_process(str(logdir / "2d"), str(tmp_path), _wholes(ranks), seen)
    assert same > 0  # some tensors hold the same data as on one process: counted exactly
    records = read_records(str(logdir / "2d"))
    assert records["TwoBlocks", "Activation", 1].record.numel == ROWS * 8  # counted once
    written = os.listdir(logdir / "2d")  # one event file: one rank writes, nothing per rank
    assert len(written) == 1 and written[0].startswith("events.out.tfevents"), written
    for rank in ranks:
        assert rank["2d"]["collectives"][1:] == [1]  # one all_reduce per step, once laid out


def test_tracking_leaves_the_2d_training_bitwise_unchanged(four_ranks):
    _, ranks = four_ranks
    for rank in ranks:
        assert_same_training(rank["2d"], rank["untracked"], "2d")


if __name__ == "__main__":
    main(sys.argv[1])
