"""Overhead of ``tandv_tb.torch.track`` on a CUDA GPU, eager (a benchmark, not a test).

Two workloads: ``reference`` is ``bench/overhead_torch.py``'s GPT (vocabulary 512, width
256, 4 blocks, sequence 128, batch 16, float32, AdamW); ``gpt2`` is a GPT-2-small-sized
decoder (vocabulary 50,304, width 768, 12 heads, 12 blocks, sequence 1,024, batch 8) in
bfloat16 autocast with AdamW, tracked with the formats ``float8_e4m3fn`` and
``float8_e5m2``. Variants, each its own copy of the model in this one process, taking
turns in rotating rounds: plain; tracked every step (all tensor types); ``every=10`` (the
watch on); untracked steps with the watch (``every`` past the run). Each round times
``--steps`` steps of a variant (windows of 10 steps for ``every=10``) between two
``torch.cuda.synchronize()``; prints the median step and its ratio to plain.

Before timing it counts the host syncs (``torch.cuda.set_sync_debug_mode``) of a plain
step, and of a tracked and an untracked step: in training (forward, backward, optimizer)
and in ``tracker.step()``. ``--profile DIR`` writes torch profiler tables (by CUDA time)
of one tracked and one untracked step of each workload there.

Run on a machine with a CUDA GPU: ``python bench/overhead_cuda.py [--workloads
reference,gpt2] [--rounds R] [--steps N] [--profile DIR]``; ``--device cpu`` runs the
same code on the CPU (a check of the script, not a figure).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, __file__.rsplit("/bench/", 1)[0])

from tandv_tb.torch import track  # noqa: E402
from tests.helpers.cuda_syncs import host_syncs  # noqa: E402
from tests.helpers.torch_models import GPT, gpt_loss  # noqa: E402

WORKLOADS = {
    # name: (GPT shape, batch, bfloat16 autocast, formats)
    "reference": (
        {"vocab": 512, "width": 256, "heads": 4, "hidden": 1024, "depth": 4, "length": 128},
        16, False, (),
    ),
    "gpt2": (
        {"vocab": 50304, "width": 768, "heads": 12, "hidden": 3072, "depth": 12, "length": 1024},
        8, True, ("float8_e4m3fn", "float8_e5m2"),
    ),
}  # fmt: skip
VARIANTS = {"plain": None, "every step": 1, "every=10": 10, "untracked, watch": 10**9}
WARMUP = 3


class Variant:
    """One copy of the model, its optimizer and (but for plain) its tracker."""

    def __init__(self, workload: str, every: int | None, device: str, logdir: str) -> None:
        shape, self.batch, self.autocast, formats = WORKLOADS[workload]
        self.vocab, self.length, self.device = shape["vocab"], shape["length"], device
        torch.manual_seed(0)
        self.model = GPT(**shape).to(device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.tracker = None
        if every is not None:
            self.tracker = track(
                self.model, logdir=logdir, optimizer=self.optimizer, every=every, formats=formats
            )

    def train(self) -> None:
        tokens = torch.randint(0, self.vocab, (self.batch, self.length + 1), device=self.device)
        with torch.autocast(self.device, dtype=torch.bfloat16, enabled=self.autocast):
            loss = gpt_loss(self.model, tokens)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()

    def step(self) -> None:
        self.train()
        if self.tracker is not None:
            self.tracker.step()


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def profile(variant: Variant, path: Path) -> None:
    """A profiler table of one step of ``variant``, by CUDA time."""
    from torch.profiler import ProfilerActivity

    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as profiler:
        variant.step()
        synchronize(variant.device)
    table = profiler.key_averages().table(sort_by="cuda_time_total", row_limit=20)
    path.write_text(table)


def run(workload: str, rounds: int, steps: int, device: str, profile_dir: Path | None) -> None:
    with tempfile.TemporaryDirectory() as logdir, contextlib.ExitStack() as stack:
        variants = {
            name: Variant(workload, every, device, f"{logdir}/{i}")
            for i, (name, every) in enumerate(VARIANTS.items())
        }
        for variant in variants.values():
            if variant.tracker is not None:
                stack.enter_context(variant.tracker)
            for _ in range(WARMUP):
                variant.step()
        tracked, untracked = variants["every step"], variants["untracked, watch"]
        print(
            f"{workload}: host syncs: plain step {host_syncs(variants['plain'].train)}; "
            f"tracked step: training {host_syncs(tracked.train)}, "
            f"step() {host_syncs(tracked.tracker.step)}; untracked step: training "
            f"{host_syncs(untracked.train)}, step() {host_syncs(untracked.tracker.step)}",
            flush=True,
        )
        times: dict[str, list[float]] = {name: [] for name in variants}
        order = list(variants)
        for _ in range(rounds):
            for name in order:
                count = steps * (10 if name == "every=10" else 1)  # whole windows of 10
                synchronize(device)
                start = time.perf_counter()
                for _ in range(count):
                    variants[name].step()
                synchronize(device)
                times[name].append((time.perf_counter() - start) / count)
            order = order[1:] + order[:1]
        plain = statistics.median(times["plain"])
        for name, seconds in times.items():
            median = statistics.median(seconds)
            print(f"{workload}: {name:18s} {median * 1e3:9.2f} ms  {median / plain:7.3f}x")
        if profile_dir is not None:
            for name in ("every step", "untracked, watch"):
                slug = name.split(",")[0].replace(" ", "_")
                profile(variants[name], profile_dir / f"profile_{workload}_{slug}.txt")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="reference,gpt2", help="comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="turns of every variant")
    parser.add_argument("--steps", type=int, default=3, help="timed steps a turn")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--profile", type=Path, help="folder for profiler tables")
    args = parser.parse_args()
    workloads = args.workloads.split(",")
    unknown = set(workloads) - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workloads {sorted(unknown)}; known: {sorted(WORKLOADS)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device here (--device cpu checks the script on the CPU)")
    if torch.cuda.is_available():
        print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for workload in workloads:
        run(workload, args.rounds, args.steps, args.device, args.profile)


if __name__ == "__main__":
    main()
