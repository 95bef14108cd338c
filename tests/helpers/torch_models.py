"""Shared pieces of the torch tracker tests (no tests here): models and an event reader."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.utils.tensorboard import SummaryWriter

from tandv_tb.event_files.record import NumericsRecord
from tandv_tb.stats import tensor_stats
from tandv_tb.torch import track
from tests.helpers.tracker_records import Stored, read_records  # noqa: F401  (re-exported)

#: Every tensor type a tracker records of a model trained with Adam or AdamW.
ADAM_TYPES = {
    "Activation",
    "Gradient",
    "Weight",
    "Weight_Gradient",
    "Optimiser_State.exp_avg",
    "Optimiser_State.exp_avg_sq",
}


def expected(values: torch.Tensor | list[torch.Tensor], formats=()) -> NumericsRecord:
    """The record of a tensor (or of several, concatenated), as the engine makes it.
    Tensors of one last dimension are stacked by rows, so that block formats see the
    blocks each of them has (blocks run along the last dimension)."""
    if isinstance(values, (list, tuple)):
        widths = {v.shape[-1] if v.dim() else None for v in values}
        if len(widths) == 1 and None not in widths:
            values = torch.cat([v.detach().reshape(-1, v.shape[-1]) for v in values])
        else:
            values = torch.cat([v.detach().reshape(-1) for v in values])
    return tensor_stats(values.detach(), formats).to_record()


def assert_same(got: NumericsRecord, want: NumericsRecord, rtol: float = 2e-6) -> None:
    """Counts, bins and casts exactly; statistics to float32 storage precision."""
    assert got.dtype == want.dtype
    for field in ("numel", "zero_count", "nan_count", "posinf_count", "neginf_count"):
        assert getattr(got, field) == getattr(want, field), field
    assert got.exponent_histogram() == want.exponent_histogram()
    assert got.underflow == want.underflow and got.overflow == want.overflow
    for name, value in want.statistics.items():
        np.testing.assert_allclose(got.statistics[name], value, rtol=rtol, err_msg=name)
    assert got.blocks.keys() == want.blocks.keys()
    for name, block in want.blocks.items():
        mine = got.blocks[name]
        for field in ("underflow", "overflow", "zero_blocks", "clamped_low", "clamped_high"):
            assert getattr(mine, field) == getattr(block, field), (name, field)
        assert mine.scale_lo == block.scale_lo and np.array_equal(mine.scales, block.scales)
        np.testing.assert_allclose(mine.snr_db, block.snr_db, rtol=1e-5, err_msg=name)


class Block(nn.Module):
    """A ResNet-style block: in-place ReLU and an in-place residual add after BatchNorm."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, width)
        self.bn1 = nn.BatchNorm1d(width)
        self.relu = nn.ReLU(inplace=True)
        self.fc2 = nn.Linear(width, width)
        self.bn2 = nn.BatchNorm1d(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.fc1(x)))
        out = self.bn2(self.fc2(out))
        out += identity
        return self.relu(out)


class DecoderBlock(nn.Module):
    """LayerNorm + self-attention + MLP, pre-norm, causal."""

    def __init__(self, width: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        mask = torch.triu(torch.ones(n, n, dtype=torch.bool, device=x.device), diagonal=1)
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """A small GPT-style decoder: token + position embeddings, blocks, tied head."""

    def __init__(
        self,
        vocab: int = 64,
        width: int = 32,
        heads: int = 4,
        hidden: int = 64,
        depth: int = 2,
        length: int = 16,
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(torch.randn(length, width) * 0.02)
        self.blocks = nn.ModuleList(DecoderBlock(width, heads, hidden) for _ in range(depth))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def gpt_loss(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    logits = model(tokens[:, :-1])
    return nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())


class Poison(nn.Module):
    """The identity, but its output gets 3 NaN at the steps in ``at`` (``step`` is set
    before each training step, e.g. by ``set_step``)."""

    def __init__(self, at: set[int]) -> None:
        super().__init__()
        self.at, self.step = at, 0

    def forward(self, x):
        if self.step in self.at:
            x = x.clone()
            x.view(-1)[:3] = float("nan")
        return x


def set_step(*modules):
    """A ``before_step`` for ``train`` that tells ``modules`` the step."""

    def before(step):
        for module in modules:
            module.step = step

    return before


class NanGradient(torch.autograd.Function):
    """The identity forward; its backward returns NaN (a NaN born in the backward pass)."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return torch.full_like(grad, float("nan"))


def train(
    model, logdir, steps, *, lr=1e-2, loss_fn=None, before_step=None, scalars=False, **options
):
    """SGD on fixed random batches (seed 0); ``before_step(step)`` runs before each."""
    torch.manual_seed(0)
    batches = [torch.randn(16, 8) for _ in range(steps)]
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    writer = SummaryWriter(str(logdir)) if scalars else None
    where = {"writer": writer} if writer else {"logdir": str(logdir)}
    with track(model, optimizer=optimizer, **where, **options) as tracker:
        for step, x in enumerate(batches):
            if before_step is not None:
                before_step(step)
            out = model(x)
            loss = loss_fn(out, step) if loss_fn else out.pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            tracker.step()
            if writer:
                writer.add_scalar("loss", loss.item(), step)
    if writer:
        writer.close()
