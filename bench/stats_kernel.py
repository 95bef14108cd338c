"""Statistics engine speed: time per tensor divided by one ``tensor.sum()``, same run.

For float32 and bfloat16 torch CPU tensors of 1e4, 1e6 and 1e7 elements it times
- ``engine``: ``tandv_tb.stats.tensor_stats`` (histogram, statistics, no formats),
- ``engine+2 formats``: the same with float8_e4m3fn and float8_e5m2 cast counts,
- ``array kernel``: the branch-free kernel used on accelerators, run on the CPU,
- ``frexp way``: tandv's approach (``frexp`` histogram plus eight reductions, each read
  back with ``.item()``),
each as the median of repeated runs divided by the median time of ``tensor.sum()``.
Prints a Markdown table (pasted into bench/RESULTS.md).

With ``--blocks`` it times instead what each block-scaled format adds to the CPU kernel, in
ns per value, on one thread (as the torch tracker runs it): tensors of rows of 4,096 values,
every variant (no format, one element format, each block format, two block formats) run
once per round in turn, medians over the rounds.

    python bench/stats_kernel.py [--repeats 15] [--blocks]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import torch

from tandv_tb.stats import engine, tensor_stats
from tandv_tb.stats._array_kernel import TorchOps, compute_arrays

FORMATS = ("float8_e4m3fn", "float8_e5m2")


def median_seconds(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def frexp_way(x: torch.Tensor) -> list[float]:
    """What tandv does: frexp for the exponents, then one host sync per statistic."""
    x = x.float()
    exponents = torch.frexp(x)[1]
    torch.bincount((exponents - exponents.min()).flatten())
    return [
        t.item()
        for t in (
            x.mean(),
            x.std(),
            x.abs().mean(),
            x.abs().max(),
            x.abs().min(),
            x.pow(2).mean().sqrt(),
            x.pow(4).mean().pow(0.25),
            x.pow(8).mean().pow(0.125),
        )
    ]


BLOCK_VARIANTS = (
    (),
    ("float8_e4m3fn",),
    ("mxfp8_e4m3",),
    ("mxfp8_e4m3:rceil",),
    ("mxfp6_e2m3",),
    ("mxfp4_e2m1",),
    ("nvfp4",),
    ("mxfp4_e2m1", "nvfp4"),
)


def block_costs(repeats: int) -> None:
    """ns per value of the CPU kernel with each variant, and what it adds to no format."""
    print(
        "| dtype | elements | none | " + " | ".join("+".join(v) for v in BLOCK_VARIANTS[1:]) + " |"
    )
    print("| --- " * (len(BLOCK_VARIANTS) + 2) + "|")
    for dtype in (torch.float32, torch.bfloat16):
        for rows in (256, 1024):
            x = torch.randn(rows, 4096).to(dtype)
            times = {v: [] for v in BLOCK_VARIANTS}
            for variant in BLOCK_VARIANTS:
                engine.compute(x, variant, threads=1)  # compiled and warm
            for _ in range(repeats):
                for variant in BLOCK_VARIANTS:
                    start = time.perf_counter()
                    engine.compute(x, variant, threads=1)
                    times[variant].append(time.perf_counter() - start)
            per_value = {v: statistics.median(t) / x.numel() * 1e9 for v, t in times.items()}
            base = per_value[()]
            cells = " | ".join(f"+{per_value[v] - base:.2f}" for v in BLOCK_VARIANTS[1:])
            name = str(dtype)[6:]
            print(f"| {name} | {x.numel():.0e} | {base:.2f} ns | {cells} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--blocks", action="store_true", help="block formats' cost per value")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.blocks:
        block_costs(args.repeats)
        return
    ops = TorchOps()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("| dtype | elements | sum() | engine | engine+2 formats | array kernel | frexp way |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for dtype in (torch.float32, torch.bfloat16):
        for numel in (10**4, 10**6, 10**7):
            x = torch.randn(numel).to(dtype)
            wide, name = x.float(), str(dtype)[6:]
            base = median_seconds(x.sum, args.repeats)
            ratios = [
                median_seconds(functools.partial(fn, *fn_args), args.repeats) / base
                for fn, *fn_args in (
                    (tensor_stats, x),
                    (tensor_stats, x, FORMATS),
                    (compute_arrays, ops, wide, name, ()),
                    (frexp_way, x),
                )
            ]
            cells = " | ".join(f"{r:.1f}x" for r in ratios)
            print(f"| {name} | {numel:.0e} | {base * 1e6:.0f} us | {cells} |", flush=True)


if __name__ == "__main__":
    main()
