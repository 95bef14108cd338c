"""Benchmark of issue 29's targets (not a test): hand-written records, a sweep of many runs,
and both from a local S3 server.

Logdirs (written once into ``--workdir``, reused when their sizes match):

- ``per_tensor``: one run of ``--tensors`` x ``--steps`` records (1 M by default), **one
  event per tensor**, as a user calling ``add_numerics`` got them before the writer
  gathered a step's records (and as any writer of one event per tensor does);
- ``per_step``: the same records, one event per step (the trackers' layout, and what
  ``NumericsWriter`` writes for ``add_numerics`` now): the baseline;
- ``sweep``: ``--runs`` runs x ``--sweep-tensors`` x ``--sweep-steps`` records (64 x 200 x
  500 = 6.4 M), one event per step.

Events are framed from serialized ``Summary.Value``s of ``NumericsWriter``'s own encoding
(``numerics_value``), 16 record variants per tensor, so writing 7 M records takes a minute.

Measured, each from a cold start (``tensorboard`` started on an empty cache folder; the
default loader, which is the Python one for ``s3://``):

- hand-written: seconds from start until the ``heatmap`` route answers the full matrix
  (every tensor, every step) for ``per_tensor`` and ``per_step``;
- sweep: seconds until TensorBoard answers the plugin's ``formats`` route (its own start,
  no logdir read); until ``runs`` lists every run; until the full ``heatmap`` of one chosen
  run (the middle one, asked for right after the listing); the peak resident memory of all
  TensorBoard processes (tensorboard and its data server) while the store builds, sampled
  every 0.2 s for ``--watch`` seconds;
- the same from moto's S3 server (``tests/helpers/s3_server.py``), the files uploaded
  there, ``--logdir s3://...``; ratios S3 / local. TensorBoard reads ``s3://`` with its
  Python loader only (in its own process, beside the plugin), so the local logdir is also
  measured with ``--load_fast=false`` (``local_python``): S3 / local_python is the cost of
  the storage alone.

Usage: ``python bench/remote_sweep.py [--workdir DIR] [--rounds 3] [--skip-s3]
[--only per_tensor,...]``: rounds interleave the places (local, local_python, s3) logdir by
logdir; medians and their ratios are printed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.plugin_load import P, Server, _record  # noqa: E402

VARIANTS = 16


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _values(tensors: int, seed: int) -> tuple[list[bytes], list[list[bytes]]]:
    """Per tensor: its first value (with metadata) and ``VARIANTS`` values without, each
    a serialized ``Summary.Value`` with its field key and length (a ``Summary``'s
    ``value`` entry)."""
    from tandv_tb.event_files.metadata import TagInfo
    from tandv_tb.event_files.summary import numerics_value

    rng = np.random.default_rng(seed)
    firsts, rest = [], []
    for tensor in range(tensors):
        info = TagInfo(f"layers.{tensor}", "Activation", "Linear", tensor, ("float8_e4m3fn",))
        level = rng.normal(-4, 3)
        records = [_record(level + rng.normal(0, 0.3), rng) for _ in range(VARIANTS)]
        for record in records:
            record.underflow.pop("float8_e5m2", None)
            record.overflow.pop("float8_e5m2", None)
        entry = [numerics_value(info, r, False).SerializeToString() for r in records]
        first = numerics_value(info, records[0], True).SerializeToString()
        firsts.append(b"\x0a" + _varint(len(first)) + first)
        rest.append([b"\x0a" + _varint(len(v)) + v for v in entry])
    return firsts, rest


def _event(step: int, summary: bytes) -> bytes:
    from tensorboard.compat.proto import event_pb2

    from tandv_tb.event_files.framing import frame

    head = event_pb2.Event(wall_time=1.7e9 + step, step=step).SerializeToString()
    return frame(head + b"\x2a" + _varint(len(summary)) + summary)


def write_run(run_dir: Path, tensors: int, steps: int, per_tensor: bool, seed: int) -> None:
    from tensorboard.compat.proto import event_pb2

    from tandv_tb.event_files.event_file import FILE_VERSION
    from tandv_tb.event_files.framing import frame

    firsts, rest = _values(tensors, seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / f"events.out.tfevents.1700000000.bench.{seed}.0.tandv"
    with open(path, "wb") as file:
        version = event_pb2.Event(wall_time=1.7e9, file_version=FILE_VERSION)
        file.write(frame(version.SerializeToString()))
        for step in range(steps):
            values = [
                firsts[t] if step == 0 else rest[t][(step * 7 + t) % VARIANTS]
                for t in range(tensors)
            ]
            if per_tensor:
                file.write(b"".join(_event(step, value) for value in values))
            else:
                file.write(_event(step, b"".join(values)))


def _ready(root: Path, sizes: dict) -> bool:
    marker = root / "sizes.json"
    return marker.exists() and json.loads(marker.read_text()) == sizes


def write_logdirs(workdir: Path, args) -> dict[str, tuple[Path, int, int, int]]:
    """``{name: (logdir, runs, tensors, steps)}``, written unless already there."""
    plans = {
        "per_tensor": (1, args.tensors, args.steps, True),
        "per_step": (1, args.tensors, args.steps, False),
        "sweep": (args.runs, args.sweep_tensors, args.sweep_steps, False),
    }
    found = {}
    for name, (runs, tensors, steps, per_tensor) in plans.items():
        if name not in args.only:
            continue
        root = workdir / name
        sizes = {"runs": runs, "tensors": tensors, "steps": steps, "per_tensor": per_tensor}
        if not _ready(root, sizes):
            started = time.perf_counter()
            for run in range(runs):
                write_run(root / "logs" / f"run_{run:03d}", tensors, steps, per_tensor, run)
            (root / "sizes.json").write_text(json.dumps(sizes))
            print(f"wrote {name} in {time.perf_counter() - started:.0f} s", flush=True)
        found[name] = (root / "logs", runs, tensors, steps)
    return found


class Peak:
    """The peak of ``Server.total_rss_mb`` sampled every 0.2 s in a thread."""

    def __init__(self, server: Server):
        self.value = 0.0
        self._stop = threading.Event()

        def sample():
            while not self._stop.wait(0.2):
                try:
                    self.value = max(self.value, server.total_rss_mb())
                except OSError:
                    return

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.value


def _heatmap(run: str) -> str:
    return f"{P}heatmap?run={run}&tensor_type=Activation&metric=log2_rm2&columns=1000"


def _full(tensors: int, steps: int):
    return lambda body: len(body["layers"]) == tensors and body["total_steps"] == steps


def time_handwritten(
    logdir: str, tensors: int, steps: int, env: dict, cache: Path, flags: tuple = ()
) -> dict:
    server = Server(logdir, (f"--tandv_cache_dir={cache}", *flags), env)
    try:
        seconds = server.until(_heatmap("run_000"), _full(tensors, steps))
        return {"first_full_heatmap_s": round(seconds, 2), "rss_mb": server.total_rss_mb()}
    finally:
        server.close()


def time_sweep(
    logdir: str,
    runs: int,
    tensors: int,
    steps: int,
    env: dict,
    cache: Path,
    watch: float,
    flags: tuple = (),
) -> dict:
    server = Server(logdir, (f"--tandv_cache_dir={cache}", *flags), env)
    peak = Peak(server)
    try:
        ready = server.until(f"{P}formats", lambda body: True)  # TensorBoard serves the tab
        listed = server.until(f"{P}runs", lambda body: len(body["runs"]) == runs)
        chosen = f"run_{runs // 2:03d}"
        heatmap = server.until(_heatmap(chosen), _full(tensors, steps))
        time.sleep(max(0.0, watch - (time.time() - server.started)))
        return {
            "tensorboard_ready_s": round(ready, 2),
            "runs_listed_s": round(listed, 2),
            "chosen_heatmap_s": round(heatmap, 2),
            "peak_rss_mb": round(peak.stop(), 1),
        }
    finally:
        peak.stop()
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "tandv_sweep"))
    parser.add_argument("--tensors", type=int, default=200)
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=64)
    parser.add_argument("--sweep-tensors", type=int, default=200)
    parser.add_argument("--sweep-steps", type=int, default=500)
    parser.add_argument("--watch", type=float, default=60, help="seconds of memory sampling")
    parser.add_argument("--only", default="per_tensor,per_step,sweep")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds (medians)")
    parser.add_argument("--skip-s3", action="store_true")
    args = parser.parse_args()
    args.only = set(args.only.split(","))
    workdir = Path(args.workdir)
    logdirs = write_logdirs(workdir, args)
    print(f"load: {os.getloadavg()}", flush=True)
    places = {"local": ((), {}), "local_python": (("--load_fast=false",), {})}
    server = None
    results: dict[str, list[dict]] = {}
    try:
        if not args.skip_s3:
            from tests.helpers.s3_server import S3Server

            server = S3Server(Path(tempfile.mkdtemp()))
            server.bucket("bench")
            for name, (logdir, *_) in logdirs.items():
                started = time.perf_counter()
                server.upload(logdir, f"s3://bench/{name}")
                print(f"uploaded {name} in {time.perf_counter() - started:.0f} s", flush=True)
            places["s3"] = ((), server.env())
        for _ in range(args.rounds):
            for name, (logdir, runs, tensors, steps) in logdirs.items():
                for place, (flags, env) in places.items():
                    where = f"s3://bench/{name}" if place == "s3" else str(logdir)
                    cache = Path(tempfile.mkdtemp())
                    if name == "sweep":
                        found = time_sweep(
                            where, runs, tensors, steps, env, cache, args.watch, flags
                        )
                    else:
                        found = time_handwritten(where, tensors, steps, env, cache, flags)
                    found["load"] = round(os.getloadavg()[0], 1)
                    results.setdefault(f"{place}/{name}", []).append(found)
                    print(f"{place}/{name}: {json.dumps(found)}", flush=True)
    finally:
        if server is not None:
            server.close()
    medians = {
        key: {k: round(statistics.median(r[k] for r in rounds), 2) for k in rounds[0]}
        for key, rounds in results.items()
    }
    for key, found in medians.items():
        print(f"median {key}: {json.dumps(found)}")
    for name in logdirs:
        for base in ("local", "local_python"):
            local, remote = medians.get(f"{base}/{name}"), medians.get(f"s3/{name}")
            if local and remote:
                ratios = {
                    key: round(remote[key] / local[key], 2)
                    for key in local
                    if key.endswith("_s") and local[key]
                }
                print(f"s3/{base} {name}: {json.dumps(ratios)}")
    if "local/per_tensor" in medians and "local/per_step" in medians:
        ratio = (
            medians["local/per_tensor"]["first_full_heatmap_s"]
            / medians["local/per_step"]["first_full_heatmap_s"]
        )
        print(f"per_tensor/per_step first full heatmap: {ratio:.2f}")


if __name__ == "__main__":
    main()
