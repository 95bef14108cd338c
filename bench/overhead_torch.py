"""Overhead of ``tandv_tb.torch.track`` on the reference workload (a benchmark, not a test).

A GPT-style decoder (vocabulary 512, width 256, 4 heads, feed-forward 1024, 4 blocks of
LayerNorm + ``nn.MultiheadAttention`` + MLP), sequence 128, batch 16, AdamW, random tokens,
CPU float32, ``torch.set_num_threads(2)``. Prints the median step time of: plain training;
tracking every step, all tensor types; tracking with ``every=10`` (the mean over a window
of 10 steps, one of them tracked, median over windows); and a floor (a plain step plus one
``sum()`` over every tensor that full tracking reads), each as a ratio to plain, all in one
run, the variants interleaved in rounds.

``--track-inputs`` instead compares, step by step, plain training, tracking and tracking
with ``track_inputs=True`` (module inputs and their gradients as well): two trackers with
``every=3`` and offsets take turns, so consecutive steps are plain, tracked, tracked with
inputs, plain, ... (on a loaded machine whose speed drifts, the finest interleaving).

``--memory`` also trains a small model for 2,000 tracked steps and prints the resident
memory after 100 and after 2,000 steps (the tracker must keep nothing across steps).

Run: ``.venv/bin/python bench/overhead_torch.py [--rounds R] [--steps N] [--track-inputs]
[--memory]``
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import torch
from torch import nn

sys.path.insert(0, __file__.rsplit("/bench/", 1)[0])

from tandv_tb.torch import track  # noqa: E402
from tests.test_torch_support import GPT, gpt_loss  # noqa: E402

FLOOR = "floor (plain + one sum per tensor)"
VARIANTS = ("plain", "track every step", "track every=10", FLOOR)
VOCAB, WIDTH, HEADS, HIDDEN, DEPTH, LENGTH, BATCH = 512, 256, 4, 1024, 4, 128, 16


def make_model(seed: int = 0, **shape: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    shape = {
        "vocab": VOCAB, "width": WIDTH, "heads": HEADS, "hidden": HIDDEN, "depth": DEPTH,
        "length": LENGTH, **shape,
    }  # fmt: skip
    model = GPT(**shape)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, vocab: int = VOCAB) -> None:
    tokens = torch.randint(0, vocab, (BATCH, LENGTH + 1))
    loss = gpt_loss(model, tokens)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def timed(step: Callable[[], None], steps: int) -> list[float]:
    """Seconds per step, for ``steps`` steps."""
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return times


@contextlib.contextmanager
def floor_hooks(model: nn.Module, optimizer: torch.optim.Optimizer):
    """One ``sum()`` over every tensor full tracking reads; yields the end-of-step part."""
    sink = []

    def on_output(module, args, output):
        outputs = output if isinstance(output, tuple) else (output,)
        for tensor in outputs:
            if isinstance(tensor, torch.Tensor) and tensor.is_floating_point():
                sink.append(tensor.detach().sum())
                if tensor.requires_grad:
                    tensor.register_hook(lambda grad: sink.append(grad.sum()))

    def at_step():
        for p in model.parameters():
            sink.append(p.detach().sum())
            if p.grad is not None:
                sink.append(p.grad.sum())
            for value in optimizer.state.get(p, {}).values():
                if value.dim() > 0:
                    sink.append(value.sum())
        sink.clear()

    handles = [m.register_forward_hook(on_output) for m in model.modules()]
    try:
        yield at_step
    finally:
        for handle in handles:
            handle.remove()


def overhead(rounds: int, steps: int) -> dict[str, float]:
    """Median step time of each variant, run in interleaved rounds (so that a machine
    whose load drifts slows every variant alike); ``every=10`` is timed over whole
    windows of 10 steps, one of them tracked."""
    model, optimizer = make_model()
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}

    def train() -> None:
        train_step(model, optimizer)

    for _ in range(3):
        train()
    with tempfile.TemporaryDirectory() as logdir:
        for round_ in range(rounds):
            times["plain"] += timed(train, steps)
            with track(model, logdir=f"{logdir}/all{round_}", optimizer=optimizer) as tracker:
                times["track every step"] += timed(lambda: (train(), tracker.step()), steps)
            run = f"{logdir}/every10_{round_}"
            with track(model, logdir=run, optimizer=optimizer, every=10) as tracker:
                window = timed(lambda: (train(), tracker.step()), 10)
                times["track every=10"].append(sum(window) / len(window))
            with floor_hooks(model, optimizer) as at_step:
                times[FLOOR] += timed(lambda: (train(), at_step()), steps)
    return {name: statistics.median(values) for name, values in times.items()}


def inputs_overhead(rounds: int, steps: int) -> dict[str, float]:
    """Median step time of plain steps, tracked steps and steps tracked with
    ``track_inputs=True``, taking turns step by step (``rounds * steps`` of each)."""
    model, optimizer = make_model()
    kinds = ("plain", "track every step", "track every step, track_inputs=True")
    times: dict[str, list[float]] = {name: [] for name in kinds}
    for _ in range(3):
        train_step(model, optimizer)
    with (
        tempfile.TemporaryDirectory() as logdir,
        # Steps 0, 3, 6, ... are tracked by the first, 1, 4, 7, ... by the second.
        track(model, logdir=f"{logdir}/a", optimizer=optimizer, every=3) as outputs,
        track(
            model, logdir=f"{logdir}/b", optimizer=optimizer, every=3, init_step=2,
            track_inputs=True,
        ) as inputs,
    ):  # fmt: skip
        for step in range(3 * rounds * steps):
            start = time.perf_counter()
            train_step(model, optimizer)
            outputs.step()
            inputs.step()
            times[kinds[(step + 1) % 3]].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def resident_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def memory(steps: int = 2000) -> tuple[float, float]:
    """Resident MB after 100 and after ``steps`` steps tracked every step (small model)."""
    model, optimizer = make_model(vocab=64, width=32, hidden=64, depth=2, length=16)
    marks = {}
    with (
        tempfile.TemporaryDirectory() as logdir,
        track(model, logdir=logdir, optimizer=optimizer) as tracker,
    ):
        for step in range(1, steps + 1):
            tokens = torch.randint(0, 64, (4, 17))
            loss = gpt_loss(model, tokens)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            tracker.step()
            if step in (100, steps):
                tracker.flush()
                marks[step] = resident_mb()
    return marks[100], marks[steps]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per variant a round")
    parser.add_argument("--memory", action="store_true", help="also measure memory")
    parser.add_argument(
        "--track-inputs", action="store_true", help="also time tracking with track_inputs=True"
    )
    args = parser.parse_args()
    torch.set_num_threads(2)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{args.rounds} rounds of {args.steps} steps (every=10: of 10 steps)"
    )
    if args.track_inputs:
        results = inputs_overhead(args.rounds, args.steps)
    else:
        results = overhead(args.rounds, args.steps)
    plain = results["plain"]
    for name, seconds in results.items():
        print(f"{name:40s} {seconds * 1000:9.1f} ms  {seconds / plain:6.2f}x")
    if args.memory:
        at_100, at_end = memory()
        print(f"resident memory: {at_100:.1f} MB after 100 steps, {at_end:.1f} MB after 2000 "
              f"({at_end - at_100:+.1f} MB)")  # fmt: skip


if __name__ == "__main__":
    main()
