"""Reading summary values out of an event file: protobuf vs
``tandv_tb.event_files.event_scan`` (not a test).

Writes (once, reused) an event file of ``--tags`` tags x ``--steps`` steps with
``NumericsWriter`` (one event per step, as the trackers write; records as in
``bench/plugin_load.py``), then times, repeats interleaved, from the file's bytes and its
events' byte ranges:

- ``protobuf``: ``Event.FromString`` on each event, then each value's tag, dtype and
  ``tensor_content`` read in Python;
- ``scan``: ``scan_events`` and ``intern_tags`` (the same facts as arrays and tag indices).

Prints the median CPU seconds of this process (``time.process_time``: less disturbed by
other work on the machine's cores than wall time), microseconds a value, and the ratio
protobuf / scan.

    python bench/event_scan.py [--workdir DIR] [--tags 1000] [--steps 200] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from tensorboard.compat.proto import event_pb2

from tandv_tb.event_files.event_scan import scan_events
from tandv_tb.event_files.tag_intern import intern_tags

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plugin_load import _record, _scales  # noqa: E402  (realistic records)


def write_file(workdir: Path, tags: int, steps: int) -> Path:
    from tandv_tb import NumericsWriter
    from tandv_tb.writer import RecordItem

    run = workdir / f"run_{tags}x{steps}"
    existing = sorted(run.glob("*tfevents*"))
    if (run / "done").exists() and existing:
        return existing[0]
    rng = np.random.default_rng(0)
    start = time.process_time()
    with NumericsWriter(str(run)) as writer:
        for step, scales in enumerate(_scales(tags, steps, 0)):
            items = [
                RecordItem(f"layers.{k}", _record(float(s), rng), "Activation", "Linear", k)
                for k, s in enumerate(scales)
            ]
            writer.add_records(step, items)
    (run / "done").touch()
    print(f"wrote {tags * steps} records in {time.process_time() - start:.0f} s")
    return sorted(run.glob("*tfevents*"))[0]


def event_ranges(raw: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Byte ranges of the events of a TFRecord file (8-byte length, 4-byte CRC, the event,
    4-byte CRC; the checksums are not checked here)."""
    starts, ends, pos = [], [], 0
    while pos < len(raw):
        (length,) = struct.unpack_from("<Q", raw, pos)
        starts.append(pos + 12)
        ends.append(pos + 12 + length)
        pos += 16 + length
    return np.array(starts, np.int64), np.array(ends, np.int64)


def with_protobuf(raw: bytes, starts: np.ndarray, ends: np.ndarray) -> int:
    n = 0
    for start, end in zip(starts.tolist(), ends.tolist()):
        event = event_pb2.Event.FromString(raw[start:end])
        for value in event.summary.value:
            _ = (value.tag, value.tensor.dtype, value.tensor.tensor_content)
            n += 1
    return n


def with_scan(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> int:
    scanned = scan_events(data, starts, ends)
    assert scanned.ok.all()
    intern_tags(data, scanned)
    return len(scanned.event)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "tandv_scan")
    parser.add_argument("--tags", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    path = write_file(args.workdir, args.tags, args.steps)
    raw = path.read_bytes()
    data = np.frombuffer(raw, np.uint8)
    starts, ends = event_ranges(raw)
    n_values = with_scan(data, starts, ends)  # compiles or loads the cache
    assert with_protobuf(raw, starts, ends) == n_values
    print(f"{path.name}: {len(raw) / 2**20:.1f} MiB, {len(starts)} events, {n_values} values")

    variants = {
        "protobuf": lambda: with_protobuf(raw, starts, ends),
        "scan": lambda: with_scan(data, starts, ends),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, run in variants.items():
            start = time.process_time()
            run()
            times[name].append(time.process_time() - start)
    medians = {name: statistics.median(t) for name, t in times.items()}
    for name, seconds in medians.items():
        print(f"{name:9s} {seconds:8.4f} s  {seconds / n_values * 1e6:6.3f} us/value")
    print(f"protobuf / scan: {medians['protobuf'] / medians['scan']:.1f}x")


if __name__ == "__main__":
    main()
