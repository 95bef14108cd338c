"""Overhead of ``tandv_tb.jax.track`` on the reference workload (a benchmark, not a test).

A Flax linen GPT-style decoder with the PyTorch reference's dimensions (vocabulary 512,
width 256, 4 heads, feed-forward 1024, 4 blocks of LayerNorm + ``MultiHeadDotProductAttention``
+ MLP, untied head), sequence 128, batch 16, optax AdamW, random tokens, float32, one
``jax.jit``-compiled step, CPU. Prints the median step time of: plain training; tracking
every step, all tensor types; tracking with ``every=10`` (windows of 10 steps, each
holding one tracked step); and, to show where the time goes, tracking every step
only the module outputs (``Activation``, ``Gradient``) and only the pytrees given to
``step`` (``Weight``, ``Weight_Gradient``, ``Optimiser_State``); ``every=10`` without the
non-finite watch (on by default); and untracked steps alone (``every`` past the run), with
the watch (its compiled variant that also returns the NaN/Inf counts) and without; each as
a ratio to plain, all in one run. ``--watch`` runs only plain training and the watch's
variants. The variants take turns, one window of steps each per round, so that the
machine's load changes hit them alike; compilation is excluded (all are warmed up first).

``--pairs N`` instead times N pairs of steps, a plain step then an untracked step with the
watch (and a pair with a tracker without it), and prints the median and quartiles of the
pairs' ratios, in wall time and in the process's CPU time: neighbouring steps see the
same machine load, which a busy shared machine changes faster than windows of steps can
follow.

``--raise`` runs only plain training and ``every=10`` and untracked steps under
``on_nonfinite="record"`` and ``"raise"`` (the call's counts read when ``intercept``
returns, before the new state is handed back).

``--kernels`` first times one array's statistics inside ``jax.jit`` (``kernels``).

Run: ``.venv/bin/python bench/overhead_jax.py [--rounds N] [--window STEPS] [--watch]
[--raise] [--pairs N] [--kernels]``
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn

sys.path.insert(0, __file__.rsplit("/bench/", 1)[0])

from bench.timing import pair_count, wall_and_cpu  # noqa: E402
from tandv_tb.jax import track  # noqa: E402

VOCAB, WIDTH, HEADS, HIDDEN, DEPTH, LENGTH, BATCH = 512, 256, 4, 1024, 4, 128, 16


class DecoderBlock(nn.Module):
    """LayerNorm + causal self-attention + MLP, pre-norm."""

    heads: int
    hidden: int

    @nn.compact
    def __call__(self, x):
        h = nn.LayerNorm(name="ln1")(x)
        mask = nn.make_causal_mask(jnp.ones(x.shape[:2], jnp.int32))
        x = x + nn.MultiHeadDotProductAttention(num_heads=self.heads, name="attn")(h, h, mask=mask)
        h = nn.Dense(self.hidden, name="fc1")(nn.LayerNorm(name="ln2")(x))
        return x + nn.Dense(x.shape[-1], name="fc2")(nn.gelu(h))


class GPT(nn.Module):
    """Token + position embeddings, decoder blocks, final LayerNorm, linear head."""

    vocab: int = VOCAB
    width: int = WIDTH
    heads: int = HEADS
    hidden: int = HIDDEN
    depth: int = DEPTH
    length: int = LENGTH

    @nn.compact
    def __call__(self, tokens):
        position = self.param("position", nn.initializers.normal(0.02), (self.length, self.width))
        x = nn.Embed(self.vocab, self.width, name="embed")(tokens) + position[: tokens.shape[1]]
        for i in range(self.depth):
            x = DecoderBlock(self.heads, self.hidden, name=f"blocks_{i}")(x)
        return nn.Dense(self.vocab, name="head")(nn.LayerNorm(name="ln")(x))


def make_training(seed: int = 0):
    """The model's parameters, AdamW state and a jitted ``update``."""
    model = GPT()
    tokens = jnp.zeros((BATCH, LENGTH), jnp.int32)
    params = jax.jit(model.init)(jax.random.PRNGKey(seed), tokens)
    optimizer = optax.adamw(1e-3)

    def loss_fn(params, tokens):
        logits = model.apply(params, tokens[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    @jax.jit
    def update(params, opt_state, tokens):
        grads = jax.grad(loss_fn)(params, tokens)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, grads

    return params, optimizer.init(params), update


def timed(step: Callable[[], None], steps: int, window: int = 1) -> float:
    """Median over windows of ``window`` steps of the mean step time, in seconds."""
    times = []
    for _ in range(steps // window):
        start = time.perf_counter()
        for _ in range(window):
            step()
        times.append((time.perf_counter() - start) / window)
    return statistics.median(times)


class Training:
    """The training state and one step of it, plain or tracked."""

    def __init__(self) -> None:
        self.params, self.opt_state, self.update = make_training()
        self.key = jax.random.PRNGKey(1)

    def batch(self) -> jax.Array:
        self.key, key = jax.random.split(self.key)
        return jax.random.randint(key, (BATCH, LENGTH + 1), 0, VOCAB)

    def plain(self) -> None:
        self.params, self.opt_state, _ = self.update(self.params, self.opt_state, self.batch())
        jax.block_until_ready(self.params)

    def tracked(self, tracker, outputs: bool = True, pytrees: bool = True) -> None:
        run = functools.partial(tracker.intercept, self.update) if outputs else self.update
        self.params, self.opt_state, grads = run(self.params, self.opt_state, self.batch())
        if pytrees:
            tracker.step(self.params, self.opt_state, grads)
        else:
            tracker.step()
        jax.block_until_ready(self.params)


WATCH_VARIANTS = {
    "track every=10": dict(every=10),
    "track every=10, no watch": dict(every=10, watch_nonfinite=False),
    "untracked steps, watch": dict(every=10**9),
    "untracked steps, no watch": dict(every=10**9, watch_nonfinite=False),
}

RAISE_VARIANTS = {
    f"{what}, {policy}": dict(every=every, on_nonfinite=policy)
    for what, every in (("track every=10", 10), ("untracked steps", 10**9))
    for policy in ("record", "raise")
}


def overhead(
    rounds: int, window: int = 10, watch_only: bool = False, raise_only: bool = False
) -> dict[str, float]:
    """Median step time of each variant over windows of ``window`` steps (10 for
    ``every=10``, each window holding one tracked step). The variants take turns, one
    window each per round, so that a change in the machine's load hits them all alike;
    every window is long, since the first step after another program runs slower."""
    training = Training()
    variants = {
        "track every step": dict(every=1),
        "module outputs only, every step": dict(every=1, pytrees=False),
        "pytrees only, every step": dict(every=1, outputs=False),
    }
    variants = {**({} if watch_only else variants), **WATCH_VARIANTS}
    if raise_only:
        variants = RAISE_VARIANTS
    steps: dict[str, tuple[Callable[[], None], int]] = {"plain": (training.plain, window)}
    times: dict[str, list[float]] = {"plain": []}
    with tempfile.TemporaryDirectory() as logdir, contextlib.ExitStack() as stack:
        for label, options in variants.items():
            options = dict(options)
            every, watch = options.pop("every"), options.pop("watch_nonfinite", True)
            policy = options.pop("on_nonfinite", "record")
            run = f"{logdir}/{len(steps)}"
            tracker = stack.enter_context(
                track(logdir=run, every=every, watch_nonfinite=watch, on_nonfinite=policy)
            )
            step = functools.partial(training.tracked, tracker, **options)
            steps[label] = (step, 10 if every == 10 else window)
            times[label] = []
        for step, steps_per_window in steps.values():
            for _ in range(11 if steps_per_window == 10 else 2):  # compiles both programs
                step()
        for _ in range(rounds):
            for label, (step, steps_per_window) in steps.items():
                times[label].append(timed(step, steps_per_window, window=steps_per_window))
    return {label: statistics.median(values) for label, values in times.items()}


def paired(pairs: int) -> dict[str, list[float]]:
    """Ratios of an untracked step (watch on, and off) to the plain step just before it."""
    training = Training()
    labels = ("untracked steps, watch", "untracked steps, no watch")
    ratios: dict[str, list[float]] = {
        f"{label}{kind}": [] for label in labels for kind in ("", ", CPU time")
    }
    with tempfile.TemporaryDirectory() as logdir, contextlib.ExitStack() as stack:
        steps = {}
        for label in labels:
            watch = label.endswith(", watch")
            tracker = stack.enter_context(
                track(logdir=f"{logdir}/{watch}", every=10**9, watch_nonfinite=watch)
            )
            steps[label] = functools.partial(training.tracked, tracker)
            for _ in range(3):  # step 0 is tracked; the watched program compiles
                steps[label]()
        for _ in range(3):
            training.plain()
        for _ in range(pairs):
            for label, step in steps.items():
                plain, plain_cpu = wall_and_cpu(training.plain)
                wall, cpu = wall_and_cpu(step)
                ratios[label].append(wall / plain)
                ratios[f"{label}, CPU time"].append(cpu / plain_cpu)
    return ratios


def kernels(repeats: int = 30) -> None:
    """Best time of one array's statistics inside ``jax.jit``: the CPU kernel as an XLA
    FFI call (what a jitted program on the CPU runs) against the branch-free array kernel
    (what runs on accelerators and with several devices), and the numba kernel outside jit
    for reference; 2**19 and 2**21 float32 values (an activation and a feed-forward
    activation of the workload), without and with two float8 formats."""
    from tandv_tb.stats import _array_kernel, _xla_cpu, engine

    def best(fn, x) -> float:
        jax.block_until_ready(fn(x))
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            jax.block_until_ready(fn(x))
            times.append(time.perf_counter() - start)
        return min(times) * 1000

    print("| values | formats | FFI call (CPU kernel) | array kernel | numba, outside jit |")
    print("| --- | --- | --- | --- | --- |")
    for n in (1 << 19, 1 << 21):
        x = jax.random.normal(jax.random.PRNGKey(0), (n,), jnp.float32) * 3
        for formats in ((), ("float8_e4m3fn", "float8_e5m2")):
            ffi = jax.jit(lambda v, f=formats: _xla_cpu.compute(v * 1, "float32", f))
            array = jax.jit(
                lambda v, f=formats: _array_kernel.compute_arrays(
                    engine._jax_ops(), v * 1, "float32", f
                )
            )
            numba_ms = best(lambda v, f=formats: engine.compute(v, f, threads=1), np.asarray(x))
            print(
                f"| {n:,} | {len(formats) or 'none'} | {best(ffi, x):.2f} ms | "
                f"{best(array, x):.2f} ms | {numba_ms:.2f} ms |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed windows per variant")
    parser.add_argument("--window", type=int, default=10, help="steps per window")
    parser.add_argument("--kernels", action="store_true", help="also time the kernels alone")
    parser.add_argument("--watch", action="store_true", help="only the watch's variants")
    parser.add_argument(
        "--raise", dest="raise_", action="store_true", help='time on_nonfinite="raise"'
    )
    parser.add_argument("--pairs", type=pair_count, default=0, help="time N >= 2 pairs of steps")
    args = parser.parse_args()
    if args.kernels:
        kernels()
    print(
        f"jax {jax.__version__}, {jax.devices()[0].platform}, {args.rounds} rounds of "
        f"{args.window}-step windows"
    )
    if args.pairs:
        for label, ratios in paired(args.pairs).items():
            q1, median, q3 = statistics.quantiles(ratios, n=4)
            print(f"{label:40s} median {median:.3f}x of the plain step before it "
                  f"(quartiles {q1:.3f}-{q3:.3f}, {len(ratios)} pairs)")  # fmt: skip
        return
    results = overhead(args.rounds, args.window, watch_only=args.watch, raise_only=args.raise_)
    plain = results["plain"]
    for name, seconds in results.items():
        print(f"{name:40s} {seconds * 1000:9.1f} ms  {seconds / plain:6.2f}x")


if __name__ == "__main__":
    main()
