"""What recording the model's graph costs the PyTorch tracker (a benchmark, not a test).

A Hugging Face Llama of 48 decoder layers built from a config (``LlamaConfig(
num_hidden_layers=48, hidden_size=64, intermediate_size=128, num_attention_heads=2,
num_key_value_heads=2, vocab_size=256)``, about 630 module calls), batch 4 and sequence 64
(``--batch``, ``--seq``), AdamW, CPU float32, ``torch.set_num_threads(2)``. In one run,
interleaved in pairs: a tracked step (every tensor type, every step) that does not record
the graph, and a tracked step that records it (the tracker is told the graph is wanted
again, as after a change of the model's calls: its hooks record the step's first forward,
the graph is built, encoded and handed to the writer, which skips it when equal to the
last). Also plain untracked
steps before and after, for the tracker's own time (a tracked step less a plain one).

The graph's own time is timed where it is spent, inside the capture's hooks and its end of
the step (``GraphCapture``'s methods wrapped with a clock), wall and thread CPU time: on a
shared machine, the difference of two steps of seconds is noise. Prints the medians and
the ratio the issue bounds: the graph's time over one tracked step's time (at most 0.05x),
and over the tracker's own time in a step (tracked less plain).

The graph's time is fixed by the model's module calls; the tracker's grows with the tensors
it reads: a larger batch lowers the ratio.

Run: ``.venv/bin/python bench/graph_capture.py [--pairs N] [--batch B] [--seq S]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, __file__.rsplit("/bench/", 1)[0])

from tandv_tb.torch import track  # noqa: E402
from tandv_tb.torch.graph_capture import GraphCapture  # noqa: E402
from tests.helpers.model_graphs import small_llama  # noqa: E402

#: The graph capture's time in the current step: wall, and this thread's CPU.
SPENT = [0.0, 0.0]


def clocked(method):
    def timed(*args, **kwargs):
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            return method(*args, **kwargs)
        finally:
            SPENT[0] += time.perf_counter() - start
            SPENT[1] += time.thread_time() - cpu

    return timed


for _name in ("_on_begin", "_on_end", "start_step", "end_step"):
    setattr(GraphCapture, _name, clocked(getattr(GraphCapture, _name)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(2)
    model = small_llama(48)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    generator = torch.Generator().manual_seed(0)

    def train_step() -> None:
        ids = torch.randint(0, 256, (args.batch, args.seq), generator=generator)
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    def timed(step) -> float:
        start = time.perf_counter()
        step()
        return time.perf_counter() - start

    timed(train_step)
    plain = [timed(train_step) for _ in range(args.pairs)]
    with tempfile.TemporaryDirectory() as logdir:
        tracker = track(model, logdir=logdir, optimizer=optimizer)
        graph = tracker._graph  # the tracker's GraphCapture (private: a benchmark's probe)

        def tracked() -> None:
            train_step()
            tracker.step()

        timed(tracked)  # the first tracked step records the graph; warms the kernels
        timed(tracked)
        without, recording, spent, idle = [], [], [], []
        for _ in range(args.pairs):
            SPENT[:] = 0.0, 0.0
            without.append(timed(tracked))
            idle.append(tuple(SPENT))
            graph._wanted = True
            graph.start_step(True)  # the step begins as after a change of the calls
            SPENT[:] = 0.0, 0.0
            recording.append(timed(tracked))
            spent.append(tuple(SPENT))
        tracker.close()
    plain += [timed(train_step) for _ in range(args.pairs)]
    t_plain, t_tracked, t_graph = map(statistics.median, (plain, without, recording))
    wall, cpu = (statistics.median(s[i] for s in spent) for i in (0, 1))
    idle_wall = statistics.median(s[0] for s in idle)
    tracking = t_tracked - t_plain
    print(f"48-layer Llama, batch {args.batch} x {args.seq}, {args.pairs} pairs; medians:")
    print(f"  plain step                        {t_plain * 1e3:8.1f} ms")
    print(f"  tracked step                      {t_tracked * 1e3:8.1f} ms")
    print(f"  tracked step recording the graph  {t_graph * 1e3:8.1f} ms")
    print(f"  the graph's time in it, wall      {wall * 1e3:8.1f} ms")
    print(f"  the graph's time in it, CPU       {cpu * 1e3:8.1f} ms")
    print(f"  its hooks in a step not recording {idle_wall * 1e3:8.1f} ms")
    print(f"  graph (wall) / tracked step       {wall / t_tracked:8.3f}x  (goal <= 0.05x)")
    print(f"  graph (wall) / tracking time      {wall / tracking:8.3f}x  (tracked less plain)")


if __name__ == "__main__":
    main()
