"""Decoding stored records (``record_columns.decode_rows``) against a baseline revision's
``decode_rows``, in the same run, variants interleaved: (1) decode alone, every chunk of one
run's event files, numba already loaded, with and without bins (the store's
build leaves them out); (2) the store's build of that run in a fresh
process per variant (``NumericsStore.refresh``), the baseline's ``decode_rows`` patched in.
Also checks that both give the same arrays, bit for bit, on the run's records.

    PYTHONPATH=$PWD python bench/record_decode.py LOGDIR RUN [--baseline REV] [--rounds N]
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
_BUILD = """
import shutil, sys, tempfile, time
t0, c0 = time.perf_counter(), time.process_time()
sys.path.insert(0, {bench!r})
import record_decode
from tandv_tb.store import NumericsStore, ingest
if {baseline!r}:  # it had no with_bins: it always gave them
    baseline = record_decode.baseline_module({baseline!r}).decode_rows
    ingest.decode_rows = lambda contents, sizes, formats, **_: baseline(
        contents, sizes, formats
    )
cache = tempfile.mkdtemp()
db = NumericsStore({logdir!r}, cache)
db.refresh({run!r})
print(time.perf_counter() - t0, time.process_time() - c0)
db.close()
shutil.rmtree(cache)
"""


def baseline_module(rev: str):
    """``tandv_tb.event_files.record_columns`` as it was at git revision ``rev``."""
    source = subprocess.run(
        ["git", "show", f"{rev}:tandv_tb/event_files/record_columns.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "baseline_record_columns.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("baseline_record_columns", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _chunks(run_dir: Path):
    """Every chunk of the run's event files and its rows' format counts."""
    from tandv_tb.event_files.event_reader import read_chunk
    from tandv_tb.event_files.tag_table import TagTable
    from tandv_tb.filesystems.locations import LocalFolder

    table, chunks = TagTable(), []
    for name, size in LocalFolder(str(run_dir)).files(".").items():
        offset = 0
        while offset < size:
            chunk = read_chunk(str(run_dir / name), offset, table, final=True)
            if chunk.end <= offset:
                break
            chunks.append(chunk)
            offset = chunk.end
    n_formats = np.array([len(i.formats) if i else 0 for i in table.infos], dtype=np.int64)
    return [(c.contents, c.sizes, n_formats[c.tags]) for c in chunks]


def _decode_all(decode_rows, chunks) -> tuple[float, float]:
    """Wall and CPU seconds to decode every chunk."""
    wall, cpu = time.perf_counter(), time.process_time()
    for contents, sizes, formats in chunks:
        decode_rows(contents, sizes, formats)
    return time.perf_counter() - wall, time.process_time() - cpu


def _same(a, b) -> bool:
    return all(
        getattr(a, f).dtype == getattr(b, f).dtype
        and getattr(a, f).tobytes() == getattr(b, f).tobytes()
        for f in a.__dataclass_fields__
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("logdir")
    parser.add_argument("run")
    parser.add_argument("--baseline", default="HEAD~1")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from tandv_tb.event_files import record_columns

    variants = {"baseline": baseline_module(args.baseline).decode_rows}
    variants["this"] = record_columns.decode_rows
    print(f"load: {os.getloadavg()}")
    chunks = _chunks(Path(args.logdir) / args.run)
    n_bytes = sum(int(np.maximum(c[1], 0).sum()) for c in chunks)
    print(f"{len(chunks)} chunks, {sum(len(c[1]) for c in chunks)} records, {n_bytes >> 20} MiB")
    assert all(_same(variants["baseline"](*c), variants["this"](*c)) for c in chunks)
    print("same arrays, bit for bit, on every chunk")
    decoders = {**variants, "this, no bins": functools.partial(variants["this"], with_bins=False)}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in decoders}
    for _ in range(args.rounds):
        for name, decode in decoders.items():
            times[name].append(_decode_all(decode, chunks))
    medians = {}
    for name, values in times.items():
        walls, cpus = zip(*values)
        wall, cpu = medians[name] = statistics.median(walls), statistics.median(cpus)
        print(f"decode alone {name}: median {wall:.2f} s wall, {cpu:.2f} s CPU")
    for name in ("this", "this, no bins"):
        wall_ratio, cpu_ratio = (b / t for b, t in zip(medians["baseline"], medians[name]))
        print(f"decode alone, {name}: {wall_ratio:.2f}x faster (wall), {cpu_ratio:.2f}x less CPU")
    del chunks
    builds: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name in variants:
            script = _BUILD.format(
                bench=str(ROOT / "bench"),
                baseline=args.baseline if name == "baseline" else "",
                logdir=args.logdir,
                run=args.run,
            )
            done = subprocess.run(
                [sys.executable, "-c", script], check=True, capture_output=True, text=True
            )
            wall, cpu = map(float, done.stdout.split()[-2:])
            builds[name].append((wall, cpu))
            print(f"build {name}: {wall:.2f} s wall, {cpu:.2f} s CPU, load {os.getloadavg()}")
    for name, values in builds.items():
        walls, cpus = zip(*values)
        print(
            f"build {name}: median {statistics.median(walls):.2f} s wall, "
            f"{statistics.median(cpus):.2f} s CPU"
        )
    print(f"load: {os.getloadavg()}")


if __name__ == "__main__":
    main()
