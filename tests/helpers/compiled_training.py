"""Compiled training for the ``torch.compile`` tests: a nanoGPT-style model (written here
after the shape of nanoGPT's ``model.py``: fused QKV projection, ``scaled_dot_product_attention``,
GELU MLP, weight tying), the training loop of nanoGPT's ``train.py`` (AdamW with decayed and
non-decayed groups, gradient accumulation, gradient clipping, ``GradScaler``, ``zero_grad``
before the tracker's step), and counts of what dynamo compiled and ran."""

from __future__ import annotations

import contextlib
import dataclasses

import torch
from torch import nn
from torch._dynamo.utils import counters
from torch.nn import functional as F

from tandv_tb.torch import track


class SelfAttention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        shape = (batch, length, self.heads, width // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(batch, length, width))


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = SelfAttention(width, heads)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(approximate="tanh"), nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NanoGPT(nn.Module):
    """Token and position embeddings, pre-norm blocks, a final LayerNorm, a tied head;
    ``forward(idx, targets)`` returns ``(logits, loss)`` as nanoGPT's does."""

    def __init__(
        self, vocab: int = 64, width: int = 32, heads: int = 2, depth: int = 2, length: int = 16
    ) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(length, width)
        self.h = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss


def nanogpt_optimizer(model: nn.Module) -> torch.optim.AdamW:
    """AdamW with weight decay on the matrices only, as nanoGPT configures it."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95))


@dataclasses.dataclass
class Trained:
    losses: list[float]
    weights: dict[str, torch.Tensor]
    graphs: list[int]  # compiled graphs made by dynamo so far, after each step
    breaks: int  # graph breaks counted by dynamo over the whole run


def train_nanogpt(
    model: nn.Module,
    steps: int,
    *,
    accumulation: int = 2,
    seed: int = 0,
    device: str = "cpu",
    **tracking,
) -> Trained:
    """nanoGPT's training loop on random tokens (drawn on the CPU, then moved to the model's
    ``device``); tracked when ``tracking`` holds ``track``'s keywords (``logdir``...), the
    tracker stepped after ``zero_grad`` as nanoGPT's loop would place it."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = nanogpt_optimizer(model)
    scaler = torch.amp.GradScaler(device, enabled=False)  # nanoGPT: enabled for float16 only
    tracker = track(model, optimizer=optimizer, **tracking) if tracking else None
    losses, graphs = [], []
    breaks = sum(counters["graph_break"].values())
    with tracker if tracker is not None else contextlib.nullcontext():
        for _ in range(steps):
            for _ in range(accumulation):
                tokens = torch.randint(0, 64, (4, 17), generator=generator).to(device)
                _, loss = model(tokens[:, :-1], tokens[:, 1:])
                scaler.scale(loss / accumulation).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            if tracker is not None:
                tracker.step()
            losses.append(loss.item())
            graphs.append(counters["stats"]["unique_graphs"])
    weights = {name: p.detach().clone() for name, p in model.named_parameters()}
    return Trained(losses, weights, graphs, sum(counters["graph_break"].values()) - breaks)


@contextlib.contextmanager
def one_thread():
    """Compiled runs compared bit for bit: with two threads two plain compiled runs
    already differ (inductor's parallel reductions)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
