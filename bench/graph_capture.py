"""What recording the model's graph costs the PyTorch tracker (a benchmark, not a test).

A Hugging Face Llama of 48 decoder layers built from a config (``LlamaConfig(
num_hidden_layers=48, hidden_size=64, intermediate_size=128, num_attention_heads=2,
num_key_value_heads=2, vocab_size=256)``, about 630 module calls), batch 4, sequence 64,
AdamW, CPU float32, ``torch.set_num_threads(2)``. In one run, interleaved in pairs: a
tracked step (every tensor type, every step) that does not record the graph, and a tracked
step that records it (the tracker is told the graph is wanted again, as after a change of
the model's calls: its hooks record the step's first forward, the graph is built, encoded
and handed to the writer, which skips it when equal to the last). Also plain untracked
steps before and after, for the tracker's own time (a tracked step less a plain one).

Prints the medians and the ratio the issue bounds: the graph's extra time over one tracked
step's time, and over one step's tracking time (tracked less plain), both at most 0.05x.

Run: ``.venv/bin/python bench/graph_capture.py [--pairs N]``
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


def llama() -> torch.nn.Module:
    import transformers

    config = transformers.LlamaConfig(
        num_hidden_layers=48,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=2,
        num_key_value_heads=2,
        vocab_size=256,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(2)
    model = llama()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    generator = torch.Generator().manual_seed(0)

    def train_step() -> None:
        ids = torch.randint(0, 256, (4, 64), generator=generator)
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
        without, recording = [], []
        for _ in range(args.pairs):
            without.append(timed(tracked))
            graph._wanted = True
            graph.start_step(True)  # the step begins as after a change of the calls
            recording.append(timed(tracked))
        tracker.close()
    plain += [timed(train_step) for _ in range(args.pairs)]
    t_plain, t_tracked, t_graph = map(statistics.median, (plain, without, recording))
    extra = statistics.median(r - w for r, w in zip(recording, without))
    tracking = t_tracked - t_plain
    print(f"48-layer Llama, {args.pairs} pairs; medians:")
    print(f"  plain step                      {t_plain * 1e3:8.1f} ms")
    print(f"  tracked step                    {t_tracked * 1e3:8.1f} ms")
    print(f"  tracked step recording graph    {t_graph * 1e3:8.1f} ms")
    print(f"  graph's extra time (pair diff)  {extra * 1e3:8.1f} ms")
    print(f"  / tracked step                  {extra / t_tracked:8.3f}x  (goal <= 0.05x)")
    print(f"  / tracking time of a step       {extra / tracking:8.3f}x  (goal <= 0.05x)")


if __name__ == "__main__":
    main()
