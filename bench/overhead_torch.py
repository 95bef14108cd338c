"""Overhead of ``tandv_tb.torch.track`` on the reference workload (a benchmark, not a test).

A GPT-style decoder (vocabulary 512, width 256, 4 heads, feed-forward 1024, 4 blocks of
LayerNorm + ``nn.MultiheadAttention`` + MLP), sequence 128, batch 16, AdamW, random tokens,
CPU float32, ``torch.set_num_threads(2)``. Prints the median step time of: plain training;
tracking every step, all tensor types; tracking with ``every=10`` (the mean over a window
of 10 steps, one of them tracked, median over windows), with the non-finite watch (the
default) and without; untracked steps alone (``every`` past the run, its tracked step 0
left out of the timing), with the watch and without; and a floor (a plain step plus one
``sum()`` over every tensor that full tracking reads), each as a ratio to plain, all in one
run, the variants interleaved in rounds. ``--watch`` times only plain training and the
watch's variants (more rounds in the same time).

``--pairs N`` times N pairs of steps, a plain step then an untracked step with the watch
(and a pair with a tracker without it), each variant its own copy of the model, and
prints the median and quartiles of the pairs' ratios, in wall time and in the process's
CPU time: neighbouring steps see the same machine load, which a busy shared machine
changes faster than rounds can follow.

``--watch-share`` times the watch's own code inside untracked steps (every call of its
hooks and its work at ``step()``), in wall time and in the training thread's CPU time
(which time spent waiting for a busy machine's cores does not inflate), beside the
untracked step's wall time.

``--track-inputs`` instead compares, step by step, plain training, tracking and tracking
with ``track_inputs=True`` (module inputs and their gradients as well): two trackers with
``every=3`` and offsets take turns, so consecutive steps are plain, tracked, tracked with
inputs, plain, ... (on a loaded machine whose speed drifts, the finest interleaving).

``--blocks F,G`` times plain training, tracking every step and tracking every step with
the block-scaled formats F and G (``formats=``), interleaved in rounds, and prints what the
formats add to tracking, as a share of a plain step (wall and the process's CPU time).

``--raise`` times what ``on_nonfinite="raise"`` adds: plain training, and ``every=10``
(whole windows) and untracked steps each under ``"record"`` (the default) and
``"raise"`` (the step's counts read at the optimizer's step, before its update),
interleaved in rounds.

``--memory`` also trains a small model for 2,000 tracked steps and prints the resident
memory after 100 and after 2,000 steps (the tracker must keep nothing across steps).

Run: ``.venv/bin/python bench/overhead_torch.py [--rounds R] [--steps N] [--watch]
[--track-inputs] [--blocks F,G] [--raise] [--memory]``
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import torch
from torch import nn

sys.path.insert(0, __file__.rsplit("/bench/", 1)[0])

from bench.timing import pair_count, wall_and_cpu  # noqa: E402
from tandv_tb.torch import track  # noqa: E402
from tests.helpers.torch_models import GPT, gpt_loss  # noqa: E402

FLOOR = "floor (plain + one sum per tensor)"
EVERY10, EVERY10_OFF = "track every=10", "track every=10, no watch"
UNTRACKED, UNTRACKED_OFF = "untracked steps, watch", "untracked steps, no watch"
VARIANTS = ("plain", "track every step", EVERY10, EVERY10_OFF, UNTRACKED, UNTRACKED_OFF, FLOOR)
WATCH_VARIANTS = ("plain", EVERY10, EVERY10_OFF, UNTRACKED, UNTRACKED_OFF)
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


def warm_model() -> tuple[nn.Module, torch.optim.Optimizer, Callable[[], None]]:
    """The reference model and its optimizer after three plain steps, and its step."""
    model, optimizer = make_model()

    def train() -> None:
        train_step(model, optimizer)

    for _ in range(3):
        train()
    return model, optimizer, train


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


def overhead(rounds: int, steps: int, variants: tuple[str, ...] = VARIANTS) -> dict[str, float]:
    """Median step time of each variant, run in interleaved rounds (so that a machine
    whose load drifts slows every variant alike); ``every=10`` is timed over whole
    windows of 10 steps, one of them tracked."""
    model, optimizer, train = warm_model()
    times: dict[str, list[float]] = {name: [] for name in variants}

    def tracked(run: str, **options):
        return track(model, logdir=run, optimizer=optimizer, **options)

    with tempfile.TemporaryDirectory() as logdir:
        for round_ in range(rounds):
            times["plain"] += timed(train, steps)
            if "track every step" in variants:
                with tracked(f"{logdir}/all{round_}") as tracker:
                    times["track every step"] += timed(lambda: (train(), tracker.step()), steps)
            for name, watch in ((EVERY10, True), (EVERY10_OFF, False)):
                with tracked(f"{logdir}/{name}{round_}", every=10, watch_nonfinite=watch) as t:
                    window = timed(lambda: (train(), t.step()), 10)
                    times[name].append(sum(window) / len(window))
            for name, watch in ((UNTRACKED, True), (UNTRACKED_OFF, False)):
                with tracked(f"{logdir}/{name}{round_}", every=10**9, watch_nonfinite=watch) as t:
                    train(), t.step()  # step 0 is tracked
                    times[name] += timed(lambda: (train(), t.step()), steps)
            if FLOOR in variants:
                with floor_hooks(model, optimizer) as at_step:
                    times[FLOOR] += timed(lambda: (train(), at_step()), steps)
    return {name: statistics.median(values) for name, values in times.items()}


def raise_overhead(rounds: int, steps: int) -> dict[str, float]:
    """Median step time of plain training and of ``every=10`` windows and untracked steps
    under ``on_nonfinite="record"`` and ``"raise"``, in interleaved rounds."""
    model, optimizer, train = warm_model()
    policies = ("record", "raise")
    names = ["plain"] + [f"{what}, {p}" for what in ("every=10", "untracked") for p in policies]
    times: dict[str, list[float]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as logdir:
        for round_ in range(rounds):
            times["plain"] += timed(train, steps)
            for policy in policies:
                run = f"{logdir}/{policy}{round_}"
                with track(model, logdir=run, optimizer=optimizer, every=10,
                           on_nonfinite=policy) as t:  # fmt: skip
                    window = timed(lambda: (train(), t.step()), 10)
                    times[f"every=10, {policy}"].append(sum(window) / len(window))
                with track(model, logdir=run + "u", optimizer=optimizer, every=10**9,
                           on_nonfinite=policy) as t:  # fmt: skip
                    train(), t.step()  # step 0 is tracked
                    times[f"untracked, {policy}"] += timed(lambda: (train(), t.step()), steps)
    return {name: statistics.median(values) for name, values in times.items()}


def blocks_overhead(
    rounds: int, steps: int, formats: tuple[str, ...]
) -> dict[str, tuple[float, float]]:
    """Median (wall, process CPU) seconds a step of plain training, of tracking every step
    and of tracking every step with block ``formats``, the three taking turns in rounds."""
    model, optimizer, train = warm_model()
    kinds = {
        "plain": None,
        "track every step": (),
        f"track every step, {'+'.join(formats)}": formats,
    }
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in kinds}
    with tempfile.TemporaryDirectory() as logdir:
        for round_ in range(rounds):
            for name, chosen in kinds.items():
                if chosen is None:
                    times[name] += [wall_and_cpu(train) for _ in range(steps)]
                    continue
                run = f"{logdir}/{len(chosen)}-{round_}"
                with track(model, logdir=run, optimizer=optimizer, formats=chosen) as tracker:
                    train(), tracker.step()  # the first step compiles what the formats need
                    times[name] += [
                        wall_and_cpu(lambda: (train(), tracker.step())) for _ in range(steps)
                    ]
    return {
        name: tuple(statistics.median(part) for part in zip(*values))
        for name, values in times.items()
    }


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


def paired(pairs: int) -> dict[str, list[float]]:
    """Ratios of an untracked step (watch on, and off) to the plain step just before it."""
    plain_model, plain_optimizer = make_model()
    ratios: dict[str, list[float]] = {UNTRACKED: [], UNTRACKED_OFF: []}
    ratios |= {f"{label}, CPU time": [] for label in ratios}
    with tempfile.TemporaryDirectory() as logdir, contextlib.ExitStack() as stack:
        steps = {}
        for label in (UNTRACKED, UNTRACKED_OFF):
            model, optimizer = make_model()
            tracker = stack.enter_context(
                track(
                    model,
                    logdir=f"{logdir}/{len(steps)}",
                    optimizer=optimizer,
                    every=10**9,
                    watch_nonfinite=label == UNTRACKED,
                )
            )
            steps[label] = functools.partial(_tracked_step, model, optimizer, tracker)
            for _ in range(3):  # step 0 is tracked
                steps[label]()
        for _ in range(3):
            train_step(plain_model, plain_optimizer)
        for _ in range(pairs):
            for label, step in steps.items():
                plain, plain_cpu = wall_and_cpu(lambda: train_step(plain_model, plain_optimizer))
                wall, cpu = wall_and_cpu(step)
                ratios[label].append(wall / plain)
                ratios[f"{label}, CPU time"].append(cpu / plain_cpu)
    return ratios


def _tracked_step(model: nn.Module, optimizer: torch.optim.Optimizer, tracker) -> None:
    train_step(model, optimizer)
    tracker.step()


def watch_share(steps: int) -> tuple[float, float, float]:
    """Medians of the untracked step (watch on) and of the watch's code in it, wall time
    and thread CPU time."""
    from tandv_tb.torch import hooks, tracker

    spent = [0.0, 0.0]

    def timing(function):
        def timed_function(*args, **kwargs):
            start, cpu = time.perf_counter(), time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - start
                spent[1] += time.thread_time() - cpu

        return timed_function

    patched = {
        (hooks.ModuleHooks, "_watch_output"),
        (hooks.ModuleHooks, "_watch_gradient"),
        (tracker.Tracker, "_watched_step"),
    }
    originals = {(owner, name): getattr(owner, name) for owner, name in patched}
    for (owner, name), function in originals.items():
        setattr(owner, name, timing(function))
    model, optimizer = make_model()
    steps_s, watch_s, watch_cpu_s = [], [], []
    try:
        with (
            tempfile.TemporaryDirectory() as logdir,
            track(model, logdir=logdir, optimizer=optimizer, every=10**9) as t,
        ):
            for step in range(steps + 2):  # step 0 is tracked, step 1 warms up
                spent[:] = [0.0, 0.0]
                start = time.perf_counter()
                train_step(model, optimizer)
                t.step()
                if step >= 2:
                    steps_s.append(time.perf_counter() - start)
                    watch_s.append(spent[0])
                    watch_cpu_s.append(spent[1])
    finally:
        for (owner, name), function in originals.items():
            setattr(owner, name, function)
    return tuple(statistics.median(v) for v in (steps_s, watch_s, watch_cpu_s))


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
    parser.add_argument("--watch", action="store_true", help="only the watch's variants")
    parser.add_argument("--watch-share", action="store_true", help="the watch's own time")
    parser.add_argument("--pairs", type=pair_count, default=0, help="time N >= 2 pairs of steps")
    parser.add_argument(
        "--track-inputs", action="store_true", help="time tracking with track_inputs=True"
    )
    parser.add_argument(
        "--blocks", type=lambda text: tuple(text.split(",")), default=(),
        help="block formats (comma-separated) whose cost on top of tracking to time",
    )  # fmt: skip
    parser.add_argument(
        "--raise", dest="raise_", action="store_true", help='time on_nonfinite="raise"'
    )
    parser.add_argument("--memory", action="store_true", help="also measure memory")
    args = parser.parse_args()
    torch.set_num_threads(2)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{args.rounds} rounds of {args.steps} steps (every=10: of 10 steps)"
    )
    if args.pairs:
        for label, ratios in paired(args.pairs).items():
            q1, median, q3 = statistics.quantiles(ratios, n=4)
            print(f"{label:40s} median {median:.3f}x of the plain step before it "
                  f"(quartiles {q1:.3f}-{q3:.3f}, {len(ratios)} pairs)")  # fmt: skip
        return
    if args.watch_share:
        step_s, watch_s, cpu_s = watch_share(args.rounds * args.steps)
        print(
            f"untracked step with the watch {step_s * 1000:.1f} ms, of which the watch "
            f"{watch_s * 1000:.1f} ms wall ({watch_s / (step_s - watch_s):.1%} of the rest), "
            f"{cpu_s * 1000:.1f} ms CPU"
        )
        return
    if args.blocks:
        results = blocks_overhead(args.rounds, args.steps, args.blocks)
        plain_wall, plain_cpu = results["plain"]
        for name, (wall, cpu) in results.items():
            print(f"{name:50s} {wall * 1000:9.1f} ms {wall / plain_wall:6.2f}x   "
                  f"CPU {cpu * 1000:9.1f} ms {cpu / plain_cpu:6.2f}x")  # fmt: skip
        (_, tracked), (_, with_blocks) = list(results.items())[1:]
        added_wall = (with_blocks[0] - tracked[0]) / plain_wall
        added_cpu = (with_blocks[1] - tracked[1]) / plain_cpu
        print(f"the block formats add {added_wall:+.3f}x of a plain step (CPU: {added_cpu:+.3f}x)")
        return
    if args.raise_:
        results = raise_overhead(args.rounds, args.steps)
    elif args.track_inputs:
        results = inputs_overhead(args.rounds, args.steps)
    else:
        results = overhead(args.rounds, args.steps, WATCH_VARIANTS if args.watch else VARIANTS)
    plain = results["plain"]
    for name, seconds in results.items():
        print(f"{name:40s} {seconds * 1000:9.1f} ms  {seconds / plain:6.2f}x")
    if args.memory:
        at_100, at_end = memory()
        print(f"resident memory: {at_100:.1f} MB after 100 steps, {at_end:.1f} MB after 2000 "
              f"({at_end - at_100:+.1f} MB)")  # fmt: skip


if __name__ == "__main__":
    main()
