"""A small GPT-style byte model in PyTorch, trained with tandv_tb.torch.track."""

from __future__ import annotations

import pathlib

import torch
from torch import nn
from torch.utils.tensorboard import SummaryWriter

import tandv_tb.torch
from demo.corpus import VOCAB, batches

#: Two FP8 element formats, and two block-scaled FP4 formats: what MXFP4 and NVFP4 would
#: lose in each tensor, exact (a block format cannot be estimated after the fact).
FORMATS = ("float8_e4m3fn", "float8_e5m2", "mxfp4_e2m1", "nvfp4")


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, width: int = 64, heads: int = 4, depth: int = 2, seq: int = 64):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.position = nn.Parameter(torch.zeros(seq, width))
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, VOCAB)
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position[: tokens.shape[1]]
        mask = self.mask[: tokens.shape[1], : tokens.shape[1]]
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln_f(x))


def train(logdir: pathlib.Path, data, *, lr: float, steps: int, every: int, seed: int = 0):
    """Train one run into ``logdir``: loss and learning rate as TensorBoard scalars, the
    numerics of every tensor through the same SummaryWriter. Two threads on any machine:
    the sums' rounding depends on the thread count, and the demo's story (lr_2e-1's loss
    spike, its FP8 overflow) is the path two threads train (with one there is no spike)."""
    torch.set_num_threads(2)
    torch.manual_seed(seed)
    model = GPT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    writer = SummaryWriter(str(logdir))
    stream = batches(data, batch=16, seq=64, seed=seed)
    with tandv_tb.torch.track(
        model, writer=writer, optimizer=optimizer, every=every, formats=FORMATS
    ) as tracker:
        for step in range(steps):
            inputs, targets = (torch.from_numpy(a) for a in next(stream))
            logits = model(inputs)
            loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            tracker.step()
            writer.add_scalar("loss", loss.item(), step)
            writer.add_scalar("learning_rate", lr, step)
    writer.close()
