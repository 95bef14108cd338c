"""Benchmark of the plugin backend on a big logdir (not a test).

Writes 200 layers x 4 tensor types x 1,000 steps of numerics (normal-like tensors of 2**20
values whose scale drifts per layer and step; histograms, statistics and float8 casts
from the normal distribution), starts ``tensorboard`` (default loader) and prints:

- seconds from start until the heatmap route returns the full matrix of one tensor type;
- warm latency (median of 20) of the heatmap, histogram and series routes, both for a
  repeated query (answered from the result cache) and for changing queries (data cached,
  result computed);
- the same data written as PyTorch ``add_histogram_raw`` summaries, timed through
  TensorBoard's own histograms plugin: seconds until its tags are listed and one tag's
  data returned, and its warm latency.

Usage: ``python bench/plugin_load.py [--workdir DIR] [--layers 200] [--steps 1000]``.
An existing workdir with the same sizes is reused (writing takes minutes).
``--numerics-logdir DIR`` times the plugin on an existing numerics logdir of the same sizes
instead (e.g. one written by an older tandv_tb, to compare storage versions), and
``--no-histograms`` leaves out the histograms plugin.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import multiprocessing
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np

TYPES = ("Activation", "Gradient", "Weight", "Optimiser_State.exp_avg")
FORMATS = ("float8_e4m3fn", "float8_e5m2")
NUMEL = 2**20
_ERF = np.frompyfunc(math.erf, 1, 1)


@functools.cache
def _normal_bins(log2_sigma: float) -> tuple[int, np.ndarray]:
    """``(bins_lo, counts)`` of the exponent histogram of NUMEL normal values (the scale is
    quantized to 1/16 binade by the caller, so this is computed a few thousand times)."""
    lo, hi = math.floor(log2_sigma) - 24, math.floor(log2_sigma) + 4
    edges = 2.0 ** np.arange(lo, hi + 2, dtype=np.float64) / 2.0**log2_sigma
    cdf = _ERF(edges / math.sqrt(2)).astype(np.float64)  # P(|x| < edge)
    counts = np.rint(np.diff(cdf) * NUMEL).astype(np.int64)
    nonzero = np.flatnonzero(counts)
    first, last = nonzero[0], nonzero[-1]
    return lo + int(first), counts[first : last + 1]


def _record(log2_sigma: float, rng: np.random.Generator):
    from tandv_tb.event_files.record import NumericsRecord

    log2_sigma = round(log2_sigma * 16) / 16
    lo, counts = _normal_bins(log2_sigma)
    sigma = 2.0**log2_sigma
    exponents = lo + np.arange(len(counts))
    under = {"float8_e4m3fn": -10, "float8_e5m2": -17}
    over = {"float8_e4m3fn": 9, "float8_e5m2": 16}
    return NumericsRecord(
        dtype="float32",
        numel=int(counts.sum()),
        zero_count=0,
        nan_count=0,
        posinf_count=0,
        neginf_count=0,
        bins_lo=lo,
        counts=counts,
        statistics={
            "mean": float(rng.normal(0, sigma / 1000)),
            "std": sigma,
            "mean_abs": sigma * math.sqrt(2 / math.pi),
            "max_abs": sigma * 5.0,
            "min_abs": sigma * 1e-6,
            "min_abs_nonzero": sigma * 1e-6,
            "rm2": sigma,
            "rm4": sigma * 3**0.25,
            "rm8": sigma * 105**0.125,
        },
        underflow={f: int(counts[exponents < under[f]].sum()) for f in FORMATS},
        overflow={f: int(counts[exponents >= over[f]].sum()) for f in FORMATS},
    )


def _scales(layers: int, steps: int, type_index: int) -> np.ndarray:
    """log2 of each layer's scale at each step: a per-layer level plus a slow drift."""
    rng = np.random.default_rng(type_index)
    level = rng.normal(-4 - 6 * (type_index == 1), 3, size=layers)
    drift = np.cumsum(rng.normal(0, 0.02, size=(steps, layers)), axis=0)
    return level[None, :] + drift


def _write_type(args: tuple[str, str, int, int, int]) -> None:
    """One tensor type's event file: numerics through ``NumericsWriter.add_records``, one
    event per step as the trackers write them; histograms as PyTorch's
    ``add_histogram_raw`` summaries, straight to a ``RecordWriter`` (without the writer's
    queue, which would make writing 800,000 of them take most of an hour)."""
    kind, run_dir, type_index, layers, steps = args
    scales = _scales(layers, steps, type_index)
    rng = np.random.default_rng(100 + type_index)
    if kind == "numerics":
        _write_numerics(run_dir, TYPES[type_index], scales, rng)
    else:
        _write_histograms(run_dir, TYPES[type_index], scales, rng)


def _write_numerics(
    run_dir: str, tensor_type: str, scales: np.ndarray, rng: np.random.Generator
) -> None:
    from tandv_tb import NumericsWriter
    from tandv_tb.writer import RecordItem

    with NumericsWriter(run_dir) as writer:
        for step, step_scales in enumerate(scales):
            items = [
                RecordItem(
                    f"layers.{layer}", _record(float(scale), rng), tensor_type, "Linear", layer
                )
                for layer, scale in enumerate(step_scales)
            ]
            writer.add_records(step, items)


def _write_histograms(
    run_dir: str, tensor_type: str, scales: np.ndarray, rng: np.random.Generator
) -> None:
    from tensorboard.compat.proto import event_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter
    from torch.utils.tensorboard.summary import histogram_raw

    Path(run_dir).mkdir(parents=True, exist_ok=True)
    path = Path(run_dir) / f"events.out.tfevents.{int(time.time())}.bench.{tensor_type}"
    with open(path, "wb") as file:
        writer = RecordWriter(file)
        first = event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2")
        writer.write(first.SerializeToString())
        for step, step_scales in enumerate(scales):
            for layer, scale in enumerate(step_scales):
                record = _record(float(scale), rng)
                sigma = record.statistics["std"]
                value = histogram_raw(
                    f"{tensor_type}/layers.{layer}",
                    min=-5 * sigma,
                    max=5 * sigma,
                    num=record.numel,
                    sum=0.0,
                    sum_squares=record.numel * sigma**2,
                    bucket_limits=(
                        2.0 ** (record.bins_lo + 1 + np.arange(len(record.counts)))
                    ).tolist(),
                    bucket_counts=record.counts.tolist(),
                )
                event = event_pb2.Event(wall_time=time.time(), step=step, summary=value)
                writer.write(event.SerializeToString())
        writer.close()


def write_logdirs(workdir: Path, layers: int, steps: int) -> tuple[Path, Path]:
    numerics, histograms = workdir / "numerics", workdir / "histograms"
    from tandv_tb.event_files.metadata import PLUGIN_DATA_VERSION

    stamp = workdir / f"done_{layers}x{steps}_v{PLUGIN_DATA_VERSION}_event_per_step"
    if stamp.exists():
        print(f"reusing {workdir}")
        return numerics, histograms
    shutil.rmtree(numerics, ignore_errors=True)
    shutil.rmtree(histograms, ignore_errors=True)
    jobs = [("numerics", str(numerics / "bench"), t, layers, steps) for t in range(len(TYPES))]
    jobs += [("histograms", str(histograms / "bench"), t, layers, steps) for t in range(4)]
    start = time.time()
    with multiprocessing.get_context("spawn").Pool(min(4, os.cpu_count() or 1)) as pool:
        pool.map(_write_type, jobs)
    print(f"wrote both logdirs in {time.time() - start:.0f} s")
    stamp.touch()
    return numerics, histograms


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


class Server:
    """A ``tensorboard`` on a free port, with ``extra`` flags and ``env`` added to ours."""

    def __init__(self, logdir: Path, extra: tuple[str, ...] = (), env: dict | None = None):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        tensorboard = str(Path(sys.executable).with_name("tensorboard"))
        self.started = time.time()
        self.process = subprocess.Popen(
            [tensorboard, f"--logdir={logdir}", "--host=127.0.0.1", f"--port={self.port}", *extra],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
        )

    def total_rss_mb(self) -> float:
        """Resident memory (MiB) of all its processes together."""
        return round(sum(self.rss_mb().values()), 1)

    def get(self, path: str, gzip: bool = False):
        url = f"http://127.0.0.1:{self.port}{path}"
        headers = {"Accept-Encoding": "gzip"} if gzip else {}
        try:
            request = urllib.request.Request(url, headers=headers)
            with urllib.request.urlopen(request, timeout=120) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()
        except OSError:
            return None, b""

    def until(self, path: str, done) -> float:
        """Seconds from start until ``done(json)`` holds for the answer of ``path``."""
        while True:
            status, body = self.get(path)
            if status == 200 and done(json.loads(body)):
                return time.time() - self.started
            if self.process.poll() is not None:
                raise RuntimeError("tensorboard exited")
            time.sleep(0.1)

    def median_ms(self, paths: list[str], gzip: bool = False) -> float:
        """Median latency; ``gzip`` asks for a gzipped body, as browsers do."""
        times = []
        for path in paths:
            start = time.perf_counter()
            status, _ = self.get(path, gzip)
            times.append((time.perf_counter() - start) * 1000)
            assert status == 200, (path, status)
        return statistics.median(times)

    def rss_mb(self) -> dict[str, float]:
        """Resident memory (MiB) of tensorboard and of its children (the data server)."""
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        kids = [int(p) for p in children.read_text().split()] if children.exists() else []
        return {
            "tensorboard_rss_mb": _rss_mb(self.process.pid),
            "data_server_rss_mb": sum(_rss_mb(pid) for pid in kids),
        }

    def close(self):
        self.process.terminate()
        self.process.wait(30)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


P = "/data/plugin/tandv/"


def bench_numerics(logdir: Path, layers: int, steps: int) -> dict:
    server = Server(logdir)
    try:
        heatmap = P + f"heatmap?run=bench&tensor_type=Activation&metric=log2_rm2&columns={steps}"

        def full(body):
            values = body["values"]
            if isinstance(values, list):  # a tandv_tb before the base64 matrix
                complete = all(v is not None for row in values for v in row)
            else:
                complete = values["missing"] is None
            return len(body["layers"]) == layers and body["total_steps"] == steps and complete

        listed = server.until(P + "runs", lambda body: len(body["runs"]) == 1)
        first = server.until(heatmap, full)
        result = {"run_listed_s": listed, "full_heatmap_s": first}
        metrics = ["log2_rm2", "log2_max_abs", "mean", "std", "zero_fraction"]
        result["heatmap_cached_ms"] = server.median_ms([heatmap] * 20)
        result["heatmap_fresh_ms"] = server.median_ms(
            [
                P + f"heatmap?run=bench&tensor_type=Activation&metric={metrics[i % 5]}"
                f"&columns={steps - i}"
                for i in range(20)
            ]
        )
        result["heatmap_fresh_gzip_ms"] = server.median_ms(
            [
                P + f"heatmap?run=bench&tensor_type=Activation&metric={metrics[(i + 1) % 5]}"
                f"&columns={steps - i}"
                for i in range(20)
            ],
            gzip=True,
        )
        result["heatmap_bytes"] = len(server.get(heatmap)[1])
        result["heatmap_other_type_first_ms"] = server.median_ms(
            [P + f"heatmap?run=bench&tensor_type=Gradient&metric=log2_rm2&columns={steps}"]
        )
        result["histogram_fresh_ms"] = server.median_ms(
            [
                P + "histogram?run=bench&tensor_type=Activation"
                f"&layer=layers.{i % layers}&step={37 * i}"
                for i in range(20)
            ]
        )
        result["series_fresh_ms"] = server.median_ms(
            [
                P + f"series?run=bench&tensor_type=Activation&layer=layers.{i % layers}"
                "&metric=log2_rm2&metric=underflow_fraction&format=float8_e4m3fn"
                for i in range(20)
            ]
        )
        result.update(server.rss_mb())
        return result
    finally:
        server.close()


def bench_histograms(logdir: Path, layers: int, steps: int) -> dict:
    server = Server(logdir)
    try:
        tags_path = "/data/plugin/histograms/tags"
        n_tags = layers * len(TYPES)
        listed = server.until(tags_path, lambda b: len(b.get("bench", {})) == n_tags)
        tag = urllib.request.quote("Activation/layers.0", safe="")
        one = f"/data/plugin/histograms/histograms?run=bench&tag={tag}"
        first = server.until(one, lambda b: len(b) > 0)
        result = {"tags_listed_s": listed, "one_tag_s": first}
        result["one_tag_warm_ms"] = server.median_ms([one] * 20)
        result.update(server.rss_mb())
        return result
    finally:
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "tandv_bench")
    parser.add_argument("--layers", type=int, default=200)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--numerics-logdir", type=Path, default=None)
    parser.add_argument("--no-histograms", action="store_true")
    args = parser.parse_args()
    if args.numerics_logdir is not None:
        numerics, histograms = args.numerics_logdir, None
    else:
        args.workdir.mkdir(parents=True, exist_ok=True)
        numerics, histograms = write_logdirs(args.workdir, args.layers, args.steps)
    print(f"numerics logdir: {_size(numerics) / 2**20:.1f} MiB")
    print("tandv plugin:", json.dumps(bench_numerics(numerics, args.layers, args.steps)))
    if histograms is not None and not args.no_histograms:
        print(f"add_histogram logdir: {_size(histograms) / 2**20:.1f} MiB")
        result = bench_histograms(histograms, args.layers, args.steps)
        print("histograms plugin:", json.dumps(result))


if __name__ == "__main__":
    main()
