"""A rank that dies mid-step: the other rank's training goes on as it would without the
tracker, and what was written stays.

Two processes started here (not by torchrun, which would end the survivor): rank 1 exits
after the training part of its third step, before ``tracker.step()``; rank 0's tracker
finds the combining collective failing (gloo says at once that the peer is gone), warns
and stops, and rank 0 trains on, alone, as an untracked run does.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import warnings

import pytest
import torch
import torch.distributed as dist
from torch import nn

from tandv_tb.torch import track
from tests.helpers import REPO
from tests.helpers.torch_models import read_records

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

STEPS, DIES_AT = 5, 2


def _train(logdir: str | None) -> tuple[list[float], list[str]]:
    """The losses of ``STEPS`` steps, tracked into ``logdir`` (None: untracked), and the
    warnings the tracker gave."""
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(10 + rank)
    tracker = None if logdir is None else track(model, logdir=logdir, optimizer=optimizer)
    losses = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(STEPS):
            optimizer.zero_grad()
            loss = model(torch.randn(6, 4, generator=generator)).square().mean()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if rank == 1 and step == DIES_AT and tracker is not None:
                os._exit(3)  # gone mid-step, without a word
            if tracker is not None:
                tracker.step()
        if tracker is not None:
            tracker.close()
    return losses, [str(w.message) for w in caught if "tandv_tb" in str(w.message)]


def main(logdir: str, rank: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    tracked, said = _train(logdir)
    untracked, _ = _train(None)  # rank 0 alone: no collective
    with open(os.path.join(logdir, "rank0.json"), "w") as out:
        json.dump({"tracked": tracked, "untracked": untracked, "said": said}, out)
    os._exit(0)  # the process group's peer is gone: nothing to take down with it


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_rank_lost_mid_step_leaves_the_others_training_and_what_was_written(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    port = _free_port()
    ranks = [
        subprocess.Popen(
            [sys.executable, __file__, str(tmp_path), str(rank), str(port)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [rank.communicate(timeout=240)[0] for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 3], outputs[0][-3000:]
    with open(tmp_path / "rank0.json") as saved:
        rank0 = json.load(saved)
    assert rank0["tracked"] == rank0["untracked"]  # training went on, unchanged
    (said,) = rank0["said"]
    assert f"at step {DIES_AT}" in said and "a rank is gone" in said
    records = read_records(str(tmp_path))
    assert {step for _, _, step in records} == set(range(DIES_AT))  # kept, both ranks'
    assert records["0", "Activation", 1].record.numel == 2 * 6 * 8


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
