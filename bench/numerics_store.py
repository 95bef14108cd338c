"""Benchmark of the plugin's own numerics store at scale (not a test).

Workload: ``--runs`` runs x ``--layers`` tensors x ``--steps`` steps of Activation numerics,
written once with ``NumericsWriter`` (one event per step, as the trackers write them; the
records of ``bench/plugin_load.py``). For each variant a ``tensorboard`` (default flags) is
started and the script prints:

- seconds from start until TensorBoard answers at all (its own start, the plugin's imports
  included), and until the first full heatmap of one run (every layer, every step, 1,000
  columns) is served;
- resident memory of all TensorBoard processes (``tensorboard`` and its data server) after
  that heatmap and after the same for every run (runs compared side by side);
- seconds until TensorBoard's own data server lists every run (it reads every event file
  at each start, on the same cores);
- warm latencies (median of 15), once that is done: a new heatmap query, a histogram, a
  series of 10 layers over every step.

Variants: ``store-cold`` (an empty cache folder: the store is built), ``store-restart`` (the
same cache folder again), and with ``--baseline-src DIR`` (a checkout of tandv_tb before the
store, e.g. ``git worktree add /tmp/before 87a0b39``) ``provider``: that code, which reads
through TensorBoard's data provider with 1,000 sampled steps per tag.

Usage: ``python bench/numerics_store.py [--workdir DIR] [--runs 2] [--layers 1000]
[--steps 2500] [--baseline-src DIR]``. An existing workdir of the same sizes is reused.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from plugin_load import P, Server, _record, _scales


def _write_run(args: tuple[str, int, int, int]) -> None:
    from tandv_tb import NumericsWriter
    from tandv_tb.writer import RecordItem

    run_dir, seed, layers, steps = args
    scales = _scales(layers, steps, 0) + seed
    rng = np.random.default_rng(seed)
    with NumericsWriter(run_dir, formats=("float8_e4m3fn", "float8_e5m2")) as writer:
        for step, step_scales in enumerate(scales):
            items = [
                RecordItem(f"layers.{i}", _record(float(s), rng), "Activation", "Linear", i)
                for i, s in enumerate(step_scales)
            ]
            writer.add_records(step, items)


def write_workload(workdir: Path, runs: int, layers: int, steps: int) -> Path:
    logdir = workdir / f"logdir_{runs}x{layers}x{steps}"
    stamp = logdir / ".done"
    if stamp.exists():
        print(f"reusing {logdir}")
        return logdir
    shutil.rmtree(logdir, ignore_errors=True)
    start = time.time()
    jobs = [(str(logdir / f"run{k}"), k, layers, steps) for k in range(runs)]
    with multiprocessing.get_context("spawn").Pool(min(runs, os.cpu_count() or 1)) as pool:
        pool.map(_write_run, jobs)
    size = sum(f.stat().st_size for f in logdir.rglob("*") if f.is_file())
    print(
        f"wrote {runs * layers * steps:,} records ({size / 2**20:.0f} MiB) in "
        f"{time.time() - start:.0f} s"
    )
    stamp.touch()
    return logdir


def bench(logdir: Path, runs: int, layers: int, steps: int, extra: list[str], env: dict) -> dict:
    server = Server(logdir, tuple(extra), env)
    try:

        def heatmap(run: int, metric: str = "log2_rm2", columns: int = 1000) -> str:
            return (
                P + f"heatmap?run=run{run}&tensor_type=Activation&metric={metric}&columns={columns}"
            )

        def full(body) -> bool:
            return (
                len(body["layers"]) == layers
                and body["values"]["missing"] is None
                and body["total_steps"] >= min(steps, 1000)
            )

        up = server.until("/data/environment", lambda body: True)  # TensorBoard's own start
        first = server.until(heatmap(0), full)
        total_steps = json.loads(server.get(heatmap(0))[1])["total_steps"]
        result = {
            "server_up_s": round(up, 2),
            "first_full_heatmap_s": round(first, 2),
            "steps_shown": total_steps,
            "rss_after_one_run_mb": server.total_rss_mb(),
        }
        for run in range(1, runs):
            server.until(heatmap(run), full)
        result["rss_after_every_run_mb"] = server.total_rss_mb()
        # TensorBoard's own data server reads every event file at each start (the scalars):
        # warm figures are taken once it is done, not while it holds the 2 cores.
        result["tensorboard_loaded_s"] = round(
            server.until("/data/runs", lambda body: len(body) >= runs), 2
        )
        metrics = ["log2_max_abs", "mean", "std", "zero_fraction", "underflow_fraction"]
        result["new_heatmap_ms"] = round(
            server.median_ms(
                [
                    heatmap(i % runs, metrics[i % 5], 1000 - i)
                    + ("&format=float8_e4m3fn" if metrics[i % 5] == "underflow_fraction" else "")
                    for i in range(15)
                ]
            ),
            1,
        )
        result["histogram_ms"] = round(
            server.median_ms(
                [
                    P + f"histogram?run=run{i % runs}&tensor_type=Activation&layer=layers.{37 * i}"
                    f"&step={(811 * i) % steps}"
                    for i in range(15)
                ]
            ),
            1,
        )
        result["series_10_layers_ms"] = round(
            server.median_ms(
                [
                    P
                    + f"series?run=run{i % runs}&tensor_type=Activation&metric=log2_max_abs"
                    + "".join(f"&layer=layers.{(97 * i + 13 * k) % layers}" for k in range(10))
                    for i in range(15)
                ]
            ),
            1,
        )
        result["rss_end_mb"] = server.total_rss_mb()
        return result
    finally:
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "tandv_store"))
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--layers", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=2500)
    parser.add_argument("--baseline-src", help="a checkout of tandv_tb before the store")
    args = parser.parse_args()
    workdir = Path(args.workdir)
    logdir = write_workload(workdir, args.runs, args.layers, args.steps)
    cache = workdir / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    sizes = (args.runs, args.layers, args.steps)
    variants = [
        ("store-cold", [f"--tandv_cache_dir={cache}"], {}),
        ("store-restart", [f"--tandv_cache_dir={cache}"], {}),
    ]
    if args.baseline_src:
        path = os.pathsep.join([args.baseline_src, os.environ.get("PYTHONPATH", "")])
        variants.append(("provider", [], {"PYTHONPATH": path}))
    print(f"{args.runs} runs x {args.layers} layers x {args.steps} steps")
    for name, extra, env in variants:
        print(name, json.dumps(bench(logdir, *sizes, extra, env)), flush=True)
    store = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())
    print(f"store on disk: {store / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
