"""The tracker where users train: autocast, torch.compile, checkpointing, their writer."""

from __future__ import annotations

import glob
import os

import pytest
import tensorboardX
import torch
from torch import nn
from torch.utils import tensorboard
from torch.utils.checkpoint import checkpoint

from tandv_tb.torch import track
from tests.helpers.torch_models import GPT, Block, assert_same, gpt_loss, read_records


def run_steps(model, logdir, steps=2, x=None, **options):
    """Train ``steps`` steps of SGD on a fixed batch while tracking; returns the records."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(1)) if x is None else x
    with track(model, logdir=str(logdir), optimizer=optimizer, **options) as tracker:
        for _ in range(steps):
            optimizer.zero_grad()
            model(x).square().mean().backward()
            optimizer.step()
            tracker.step()
    return read_records(str(logdir))


def resnet(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 8), Block(), Block(), nn.Linear(8, 2))


def assert_same_records(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key in want:
        assert_same(got[key].record, want[key].record, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_records_the_actual_dtype(tmp_path, dtype):
    torch.manual_seed(0)
    model = GPT()
    tokens = torch.randint(0, 64, (2, 9))
    with track(model, logdir=str(tmp_path), track_weights=False) as tracker:
        with torch.autocast("cpu", dtype=dtype):
            loss = gpt_loss(model, tokens)
        loss.backward()
        tracker.step()
    records = read_records(str(tmp_path))
    name = {torch.bfloat16: "bfloat16", torch.float16: "float16"}[dtype]
    assert records["head", "Activation", 0].record.dtype == name
    assert records["blocks.0.mlp.0", "Gradient", 0].record.dtype == name
    assert records["embed", "Activation", 0].record.dtype == "float32"


def test_checkpointed_blocks_record_like_plain_ones(tmp_path):
    class Checkpointed(nn.Module):
        def __init__(self, reentrant: bool) -> None:
            super().__init__()
            self.inner = resnet()
            self.reentrant = reentrant

        def forward(self, x):
            x = self.inner[0](x)
            for block in (self.inner[1], self.inner[2]):
                x = checkpoint(block, x, use_reentrant=self.reentrant)
            return self.inner[3](x)

    x = torch.randn(16, 8, requires_grad=True)
    plain = run_steps(resnet(), tmp_path / "plain", x=x)
    plain = {(n.removeprefix("inner."), t, s): v for (n, t, s), v in plain.items()}
    for reentrant in (False, True):
        records = run_steps(Checkpointed(reentrant), tmp_path / f"r{reentrant}", x=x)
        records = {
            (n.removeprefix("inner."), t, s): v
            for (n, t, s), v in records.items()
            if n not in ("Checkpointed", "inner")
        }
        assert_same_records(records, {k: v for k, v in plain.items() if k[0] != "Sequential"})


def test_compiled_model_gives_the_eager_records(tmp_path):
    torch._dynamo.reset()
    eager = run_steps(resnet(), tmp_path / "eager", steps=3)
    compiled = torch.compile(resnet(), backend="aot_eager")
    records = run_steps(compiled, tmp_path / "compiled", steps=3)
    assert_same_records(records, eager)


@pytest.mark.parametrize("library", [tensorboard, tensorboardX])
def test_users_summary_writer_gets_numerics_beside_its_scalars(tmp_path, library):
    writer = library.SummaryWriter(str(tmp_path))
    model = nn.Linear(3, 2)
    with track(model, writer=writer, every=2) as tracker:
        for step in range(3):
            loss = model(torch.randn(4, 3)).square().mean()
            loss.backward()
            writer.add_scalar("loss", loss.item(), step)
            tracker.step()
    writer.add_scalar("after", 1.0, 3)  # the user's writer stays open
    writer.close()
    files = glob.glob(os.path.join(str(tmp_path), "events.out.tfevents.*"))
    assert len(files) == 1
    records = read_records(str(tmp_path))
    assert {s for _, _, s in records} == {0, 2}
    assert ("Linear", "Activation", 0) in records and ("weight", "Weight", 2) in records
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    tags = {v.tag for e in EventFileLoader(files[0]).Load() for v in e.summary.value}
    assert {"loss", "after"} <= tags
