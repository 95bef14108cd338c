"""What the private APIs that stay buy (a benchmark, not a test).

``tandv_tb.jax.compiled`` reads a jitted function's options from jax's private
``_jit_info`` to compile the tracked variant of the user's step. Without them a tracked
step could only run the Python function eagerly (interception works there too). This
times a tracked step of the reference workload of ``bench/overhead_jax.py`` both ways,
and plain training, taking turns; it prints the medians and their ratios to plain.

Run: ``.venv/bin/python bench/private_apis.py [--rounds N]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

import jax
import numpy as np

sys.path.insert(0, __file__.rsplit("/bench/", 1)[0])

from bench.overhead_jax import BATCH, LENGTH, VOCAB, make_training  # noqa: E402
from tandv_tb.jax import track  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed steps per variant")
    rounds = parser.parse_args().rounds
    params, opt_state, update = make_training()
    tokens = np.random.default_rng(0).integers(0, VOCAB, (BATCH, LENGTH), dtype=np.int32)
    eager = update.__wrapped__
    times: dict[str, list[float]] = {"plain": [], "tracked, re-jitted": [], "tracked, eager": []}
    with tempfile.TemporaryDirectory() as logdir, track(logdir=logdir) as tracker:

        def plain():
            return update(params, opt_state, tokens)

        def tracked(fn):
            out = tracker.intercept(fn, params, opt_state, tokens)
            tracker.step(out[0], out[1], out[2])
            return out

        variants = {
            "plain": plain,
            "tracked, re-jitted": lambda: tracked(update),
            "tracked, eager": lambda: tracked(eager),
        }
        for run in variants.values():  # compile and warm up
            jax.block_until_ready(run())
        for _ in range(rounds):
            for name, run in variants.items():
                start = time.perf_counter()
                jax.block_until_ready(run())
                times[name].append(time.perf_counter() - start)
    plain_time = statistics.median(times["plain"])
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:20s} {median * 1e3:9.1f} ms  {median / plain_time:6.2f}x")


if __name__ == "__main__":
    main()
