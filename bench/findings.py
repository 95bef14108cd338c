"""Benchmark of the findings (not a test): 200 layers x 4 tensor types x 1,000 steps.

The workload is ``bench/plugin_load.py``'s (``write_logdirs``: normal-like tensors whose
scale drifts, float8 casts recorded; written once and reused). Prints:

- the command line, cold (a new process each time, process start included), median of
  ``--rounds``: ``tandv-tb findings LOGDIR`` with the store already built (as after an
  earlier run or a ``tensorboard`` on the logdir) and, once, with an empty cache folder
  (the store built from the event files first); interleaved with the same process that
  only starts Python (the baseline), one that imports what the engine needs and, with
  ``--compare DIR``, the command line of another copy of the package (``DIR`` holding a
  ``tandv_tb`` folder, e.g. from ``git archive``: before and after under the same load);
  then the same command while another process holds the store (as a ``tensorboard`` on the
  logdir does): it works on a temporary copy of the store;
- in one process, where the time of a warm call goes (reading, each kind);
- in the tab: a ``tensorboard`` is started, the full heatmap of one tensor type fetched
  (as the tab does first), then the ``findings`` route for the run (first call) and again
  (answered from the result cache); once with an empty cache folder (the server builds
  the store, which loads numba and pandas on the way) and once restarted on the built
  store (it reads no event file); with ``--compare``, the same for the other copy.

Usage: ``python bench/findings.py [--workdir DIR] [--rounds 5] [--compare DIR]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from plugin_load import P, Server, write_logdirs

ROOT = Path(__file__).resolve().parents[1]
FLOOR = "import numpy, duckdb, tandv_tb.store"


def _seconds(command: list[str], env: dict) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of a command run to its end; on a
    shared machine the CPU time is the steadier figure. It runs in the folder of the
    package on its ``PYTHONPATH`` (``python -m`` puts the working folder first)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, env=env, cwd=env["PYTHONPATH"])
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):  # 1: the findings hold an error, as expected here
        raise subprocess.CalledProcessError(done.returncode, command)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu


@contextlib.contextmanager
def _held(logdir: Path, env: dict):
    """Another process holding the logdir's store open (DuckDB lets one process open it)."""
    hold = (
        "import sys; from tandv_tb.store import NumericsStore; "
        "NumericsStore(sys.argv[1]); print('holding', flush=True); sys.stdin.read()"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", hold, str(logdir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        yield
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)


def bench_command_line(logdir: Path, rounds: int, compare: Path | None) -> dict:
    cache = Path(tempfile.mkdtemp(prefix="tandv_findings_cache-"))
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "PYTHONPATH": str(ROOT)}
    findings = [sys.executable, "-m", "tandv_tb", "findings", str(logdir)]
    _seconds(findings, env)  # the store is built
    build_wall, build_cpu = _seconds(findings, {**env, "XDG_CACHE_HOME": str(cache / "fresh")})
    variants = {
        "python_start": ([sys.executable, "-c", "pass"], env),
        "imports_floor": ([sys.executable, "-c", FLOOR], env),
        "findings_cli": (findings, env),
    }
    if compare is not None:
        variants["findings_cli_compare"] = (findings, {**env, "PYTHONPATH": str(compare)})
        _seconds(*variants["findings_cli_compare"])  # its store too, if its schema differs
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, (command, command_env) in variants.items():
            times[name].append(_seconds(command, command_env))
    held = []
    with _held(logdir, env):
        for _ in range(rounds):
            held.append(_seconds(findings, env))
    times["findings_cli_store_held"] = held
    shutil.rmtree(cache, ignore_errors=True)
    medians = {}
    for name, pairs in times.items():
        medians[f"{name}_wall_s"] = round(statistics.median(w for w, _ in pairs), 2)
        medians[f"{name}_cpu_s"] = round(statistics.median(c for _, c in pairs), 2)
    medians["findings_cli_store_built_first_wall_s"] = round(build_wall, 2)
    medians["findings_cli_store_built_first_cpu_s"] = round(build_cpu, 2)
    return medians


def breakdown(logdir: Path) -> dict:
    """Seconds of each part of one warm call, in this process."""
    from tandv_tb.diagnosis import Thresholds, trends
    from tandv_tb.diagnosis import low_precision as lp
    from tandv_tb.diagnosis.run_numerics import RunNumerics
    from tandv_tb.store import NumericsStore

    thresholds = Thresholds()
    db = NumericsStore(str(logdir), Path(tempfile.gettempdir()) / "tandv_findings_breakdown")
    (run,) = db.runs()
    db.refresh(run)  # the store is built (or brought up to date)
    parts = {}

    def timed(name, call):
        start = time.perf_counter()
        result = call()
        parts[name] = round(time.perf_counter() - start, 3)
        return result

    numerics = timed("read_columns", lambda: RunNumerics.read(db, run))
    shares = timed("read_casts", lambda: lp.format_shares(db, numerics))
    found = timed("overflow", lambda: lp.overflow_findings(numerics, shares, thresholds))
    found += timed("underflow", lambda: lp.underflow_findings(numerics, shares, thresholds))
    found += timed("scale", lambda: lp.scale_findings(db, numerics, shares, thresholds))
    drifts = timed("drift_search", lambda: trends.find_drifts(numerics, thresholds))
    found += timed("dead", lambda: trends.dead_findings(numerics, thresholds))
    parts["records"] = len(numerics)
    parts["findings"] = len(found)
    parts["drift_jumps"] = len(drifts.rows)
    db.close()
    return parts


def _tab_once(logdir: Path, env: dict) -> dict:
    server = Server(logdir, env=env)
    try:
        heatmap = f"{P}heatmap?run=bench&tensor_type=Activation&metric=log2_rm2&columns=1000"
        after = server.until(heatmap, lambda body: body["total_steps"] > 0)
        start = time.perf_counter()
        status, body = server.get(f"{P}findings?run=bench")
        first = time.perf_counter() - start
        assert status == 200, body[:300]
        start = time.perf_counter()
        server.get(f"{P}findings?run=bench")
        again = time.perf_counter() - start
        return {
            "heatmap_after_start_s": round(after, 2),
            "findings_first_call_s": round(first, 2),
            "findings_repeated_ms": round(again * 1000, 1),
            "findings": len(json.loads(body)["findings"]),
        }
    finally:
        server.close()


def bench_tab(logdir: Path, package: Path) -> dict:
    """The server builds the store, then a second server starts on the built store."""
    cache = Path(tempfile.mkdtemp(prefix="tandv_findings_tab-"))
    env = {"XDG_CACHE_HOME": str(cache), "PYTHONPATH": str(package)}
    try:
        built = _tab_once(logdir, env)
        return {"store_built_by_server": built, "restarted": _tab_once(logdir, env)}
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "tandv_bench")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--compare", type=Path, metavar="DIR", help="another copy of the package")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    numerics, _ = write_logdirs(args.workdir, 200, 1000)
    print(f"load average {os.getloadavg()[0]:.1f}")
    print("command line:", json.dumps(bench_command_line(numerics, args.rounds, args.compare)))
    print("one warm call, by part:", json.dumps(breakdown(numerics)))
    print("in the tab:", json.dumps(bench_tab(numerics, ROOT)))
    if args.compare is not None:
        print("in the tab (compare):", json.dumps(bench_tab(numerics, args.compare)))
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
