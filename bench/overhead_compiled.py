"""Overhead of ``tandv_tb.torch.track`` on the reference workload compiled with
``torch.compile`` (inductor on the CPU): a benchmark, not a test.

The workload is ``bench/overhead_torch.py``'s GPT (vocabulary 512, width 256, 4 blocks,
sequence 128, batch 16, AdamW, CPU float32, two threads), wrapped by ``torch.compile``.
Each variant runs in a process of its own (in one process two compiled models disturb
each other's graphs, and a model tracked once keeps its compiled code), and the variants
take turns, round after round, in a rotating order, so that a machine whose load drifts
slows them alike. A process compiles, warms up, then times its steps; it also counts what
dynamo did (``torch._dynamo.utils.counters``): graph breaks, and graphs compiled after the
first tracked and the first untracked step (recompiles). Ratios are given in wall time
and in the process's CPU time (all its threads), which a busy machine inflates less.

Variants: ``plain`` (compiled, untracked); ``every step`` (tracked every step, all tensor
types); ``every=10`` (the mean over windows of 10 steps, one of them tracked, the watch
on); ``untracked, watch`` and ``untracked, no watch`` (``every`` past the run, its tracked
step 0 left out of the timing). Prints each variant's median step and its ratio to plain,
and the least any watch that reads every value once could cost: the ``untracked, watch``
process sums, by torch over both threads, tensors of the sizes its step 0 recorded.

Run: ``.venv/bin/python bench/overhead_compiled.py [--rounds R] [--steps N]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time

VARIANTS = ("plain", "every step", "every=10", "untracked, watch", "untracked, no watch")
OPTIONS = {
    "every step": {"every": 1},
    "every=10": {"every": 10},
    "untracked, watch": {"every": 10**9},
    "untracked, no watch": {"every": 10**9, "watch_nonfinite": False},
}
WARMUP = 12  # steps before timing: both compiled variants are made at steps 0 and 1


def worker(variant: str, steps: int) -> dict:
    """Time ``steps`` steps of ``variant`` in this process (windows of 10 for every=10)."""
    import torch
    from torch._dynamo.utils import counters

    sys.path.insert(0, __file__.rsplit("/bench/", 1)[0])
    from bench.overhead_torch import make_model, train_step
    from tandv_tb.torch import track

    torch.set_num_threads(2)
    model, optimizer = make_model()
    compiled = torch.compile(model)
    with tempfile.TemporaryDirectory() as logdir:
        tracker = None
        if variant in OPTIONS:
            tracker = track(compiled, logdir=logdir, optimizer=optimizer, **OPTIONS[variant])

        def step() -> None:
            train_step(compiled, optimizer)
            if tracker is not None:
                tracker.step()

        graphs = []
        for _ in range(WARMUP):
            step()
            graphs.append(counters["stats"]["unique_graphs"])
        window = 10 if variant == "every=10" else 1
        times, cpu_times = [], []
        for _ in range(steps):
            start, cpu = time.perf_counter(), time.process_time()
            for _ in range(window):
                step()
            times.append((time.perf_counter() - start) / window)
            cpu_times.append((time.process_time() - cpu) / window)
        if tracker is not None:
            tracker.close()
        floor = _read_floor(logdir, steps) if variant == "untracked, watch" else []
    return {
        "times": times,
        "cpu_times": cpu_times,
        "floor": floor,
        "breaks": sum(counters["graph_break"].values()),
        "recompiles": counters["stats"]["unique_graphs"] - graphs[1],
    }


def _read_floor(logdir: str, repeats: int) -> list[float]:
    """Seconds to read once every value a watched step checks: tensors of the sizes step 0
    recorded (all tensor types), each summed by torch over its two threads, together more
    than the caches hold. No watch that reads each value can cost less. Not
    ``overhead_torch.floor_hooks``' sums inside the step: hooks of its own would change the
    compiled graph."""
    import torch

    from tandv_tb.frame import read_frame

    frame = read_frame(logdir)
    sizes = frame.loc[frame[("metadata", "step")] == 0, ("scalar_stats", "numel")]
    tensors = [torch.randn(int(n)) for n in sizes]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for tensor in tensors:
            tensor.sum()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4, help="turns of every variant")
    parser.add_argument("--steps", type=int, default=8, help="timed steps (or windows) a turn")
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.steps)))
        return
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    cpu_times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    counts: dict[str, tuple[int, int]] = {}
    floor: list[float] = []
    for round_ in range(args.rounds):
        shift = round_ % len(VARIANTS)
        for variant in VARIANTS[shift:] + VARIANTS[:shift]:
            command = [sys.executable, __file__, "--worker", variant, "--steps", str(args.steps)]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            times[variant] += result["times"]
            cpu_times[variant] += result["cpu_times"]
            counts[variant] = (result["breaks"], result["recompiles"])
            floor += result["floor"]
    plain = statistics.median(times["plain"])
    plain_cpu = statistics.median(cpu_times["plain"])
    print(
        f"{'variant':<22} {'median step':>12} {'vs plain':>9} {'CPU vs plain':>13} "
        f"{'breaks':>7} {'recompiles':>11}"
    )
    for variant in VARIANTS:
        median = statistics.median(times[variant])
        cpu = statistics.median(cpu_times[variant])
        breaks, recompiles = counts[variant]
        print(
            f"{variant:<22} {median * 1e3:>9.1f} ms {median / plain:>8.3f}x "
            f"{cpu / plain_cpu:>12.3f}x {breaks:>7} {recompiles:>11}"
        )
    least = statistics.median(floor)
    print(
        f"reading every watched value once (torch sum, {least * 1e3:.1f} ms): "
        f"{1 + least / plain:.3f}x, the least an untracked step with the watch can cost"
    )


if __name__ == "__main__":
    main()
