"""Overhead of ``tandv_tb.torch.track`` on a CUDA GPU, eager (a benchmark, not a test).

Two workloads: ``reference`` is ``bench/overhead_torch.py``'s GPT (vocabulary 512, width
256, 4 blocks, sequence 128, batch 16, float32, AdamW); ``gpt2`` is a GPT-2-small-sized
decoder (vocabulary 50,304, width 768, 12 heads, 12 blocks, sequence 1,024, batch 8) in
bfloat16 autocast with AdamW, tracked with the formats ``float8_e4m3fn``, ``float8_e5m2``
and ``nvfp4``. Variants, each its own copy of the model in this one process, taking
turns in rotating rounds: plain; tracked every step (all tensor types); ``every=10`` (the
watch on); untracked steps with the watch (``every`` past the run). Each round times
``--steps`` steps of a variant (windows of 10 steps for ``every=10``) between two
``torch.cuda.synchronize()``; prints the median step and its ratio to plain.

The kernels are those ``TANDV_TB_KERNEL`` picks (printed first): by default, on a GPU, the
Triton path (one fused kernel per hooked tensor, a few launches for what ``step()``
reads, the watch's counters), or the array kernel where triton does not import;
``TANDV_TB_KERNEL=array`` times the array kernel instead.

Before timing it counts the host syncs (``torch.cuda.set_sync_debug_mode``) of a plain
step, and of a tracked and an untracked step: in training (forward, backward, optimizer)
and in ``tracker.step()``. After timing it times the statistics of the tensors one tracked
step records (every module output and its gradient, the weights, their gradients, the
optimizer's state; copies of one plain step's) against one ``torch.sum`` of each: each
tensor's own launches as the hooks make them, and all of them in the launches of
``stats.compute_many``. ``--profile DIR`` writes torch profiler tables (by CUDA time) of
one tracked and one untracked step of each workload there.

Run on a machine with a CUDA GPU: ``python bench/overhead_cuda.py [--workloads
reference,gpt2] [--rounds R] [--steps N] [--profile DIR]``; ``--device cpu`` runs the
same code on the CPU, by default on the ``tiny`` workload (a check of the script, not a
figure; ``TANDV_TB_KERNEL=triton TRITON_INTERPRET=1`` takes it through the Triton path in
Triton's interpreter).
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

from tandv_tb import stats  # noqa: E402
from tandv_tb.torch import naming, track  # noqa: E402
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
        8, True, ("float8_e4m3fn", "float8_e5m2", "nvfp4"),
    ),
    "tiny": (  # a check of the script on the CPU
        {"vocab": 64, "width": 32, "heads": 4, "hidden": 64, "depth": 2, "length": 16},
        2, True, ("float8_e4m3fn", "float8_e5m2", "nvfp4"),
    ),
}  # fmt: skip
VARIANTS = {"plain": None, "every step": 1, "every=10": 10, "untracked, watch": 10**9}
WARMUP = 3


class Variant:
    """One copy of the model, its optimizer and (but for plain) its tracker."""

    def __init__(self, workload: str, every: int | None, device: str, logdir: str) -> None:
        shape, self.batch, self.autocast, self.formats = WORKLOADS[workload]
        self.workload = workload
        self.vocab, self.length, self.device = shape["vocab"], shape["length"], device
        torch.manual_seed(0)
        self.model = GPT(**shape).to(device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.tracker = None
        if every is not None:
            self.tracker = track(
                self.model,
                logdir=logdir,
                optimizer=self.optimizer,
                every=every,
                formats=self.formats,
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


def recorded_tensors(variant: Variant) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Copies of what a tracked step of ``variant`` (an untracked one) would record: every
    module output and its gradient (one step's), and the weights, their gradients and the
    optimizer's state."""
    hooked: list[torch.Tensor] = []

    def keep(module, args, output) -> None:
        for _, tensor in naming.output_tensors(output, ""):
            if tensor.is_floating_point():
                hooked.append(tensor.detach().clone())
                if tensor.requires_grad:
                    tensor.register_hook(lambda grad: hooked.append(grad.detach().clone()))

    handles = [module.register_forward_hook(keep) for module in variant.model.modules()]
    try:
        variant.train()
    finally:
        for handle in handles:
            handle.remove()
    read = [p.detach().clone() for p in variant.model.parameters()]
    read += [p.grad.detach().clone() for p in variant.model.parameters() if p.grad is not None]
    read += [
        value.detach().clone()
        for state in variant.optimizer.state.values()
        for value in state.values()
        if isinstance(value, torch.Tensor) and value.dim() > 0
    ]
    return hooked, read


def kernel_against_sum(variant: Variant, rounds: int) -> None:
    """The statistics of the tensors a tracked step records against one ``torch.sum`` of
    each (median of ``rounds``, between synchronizations; the statistics' one transfer to
    the host not included)."""
    hooked, read = recorded_tensors(variant)
    everything = hooked + read
    formats, device = variant.formats, variant.device

    def sums() -> None:
        for tensor in everything:
            tensor.sum()

    def one_by_one() -> list:
        return [stats.compute(tensor, formats) for tensor in everything]

    def as_the_tracker() -> list:  # hooked tensors one by one, step()'s reads together
        return [stats.compute(tensor, formats) for tensor in hooked] + stats.compute_many(
            read, formats
        )

    timed = {}
    for name, action in (
        ("one torch.sum each", sums),
        ("statistics, each its launches", one_by_one),
        ("statistics, as the tracker", as_the_tracker),
    ):
        stats.fetch(action() or [])  # compiles, sizes the workspace
        seconds = []
        for _ in range(rounds):
            synchronize(device)
            start = time.perf_counter()
            pending = action()
            synchronize(device)
            seconds.append(time.perf_counter() - start)
            stats.fetch(pending or [])
        timed[name] = statistics.median(seconds)
    values = sum(t.numel() for t in everything)
    base = timed["one torch.sum each"]
    print(
        f"{variant.workload}: {len(everything)} tensors ({len(hooked)} hooked), "
        f"{values / 1e6:.1f} M values, formats {', '.join(formats)}"
    )
    for name, median in timed.items():
        print(f"{variant.workload}: {name:30s} {median * 1e3:9.2f} ms  {median / base:7.3f}x")


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
        kernel_against_sum(variants["plain"], rounds)
        if profile_dir is not None:
            for name in ("every step", "untracked, watch"):
                slug = name.split(",")[0].replace(" ", "_")
                profile(variants[name], profile_dir / f"profile_{workload}_{slug}.txt")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--workloads", help="comma-separated (default: reference,gpt2; tiny on the CPU)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="turns of every variant")
    parser.add_argument("--steps", type=int, default=3, help="timed steps a turn")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--profile", type=Path, help="folder for profiler tables")
    args = parser.parse_args()
    default = "tiny" if args.device == "cpu" else "reference,gpt2"
    workloads = (args.workloads or default).split(",")
    unknown = set(workloads) - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workloads {sorted(unknown)}; known: {sorted(WORKLOADS)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device here (--device cpu checks the script on the CPU)")
    if torch.cuda.is_available():
        print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    probe = torch.ones(1, device=args.device)
    print(
        f"kernels: TANDV_TB_KERNEL={stats.kernel_setting()}: statistics "
        f"{stats.torch_kernel(probe, ())}, watch {stats.watch_kernel(probe)} "
        f"for {args.device} tensors"
    )
    for workload in workloads:
        run(workload, args.rounds, args.steps, args.device, args.profile)


if __name__ == "__main__":
    main()
