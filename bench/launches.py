"""What tracking dispatches per training step, by kernel: Triton launches plus torch
operations, on a small GPT (4 blocks, AdamW, every tensor type, ``float8_e4m3fn``,
``float8_e5m2`` and ``nvfp4``; tests/helpers/step_dispatches.py says what is counted).

Prints, for the Triton path (``TANDV_TB_KERNEL=triton``) beside the array kernel
(``TANDV_TB_KERNEL=array``), in one run: per tracked tensor on a tracked step; on an
untracked step with the watch, per hooked tensor (activations and gradients) and for
everything read at the optimizer's step and ``step()`` together. Issue 40's goals: 4, 2
and 16.

Dispatches are counted on the host, so no GPU is needed: without ``--device cuda`` the
Triton kernels run on CPU tensors in Triton's interpreter (``TRITON_INTERPRET=1``, set
here), which the trackers treat exactly as GPU tensors. ``python bench/launches.py
[--device cpu|cuda] [--kernels triton,array]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

sys.path.insert(0, __file__.rsplit("/bench/", 1)[0])

GOALS = {"per tracked tensor": 4, "per hooked tensor (watch)": 2, "step() reads (watch)": 16}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--kernels", default="triton,array", help="comma-separated")
    args = parser.parse_args()
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before any Triton kernel is defined
    import torch

    from tests.helpers.step_dispatches import SHAPE, gpt_step_dispatches

    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device here (the default, --device cpu, counts the same)")
    where = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor()
    print(f"GPT {SHAPE}, batch 2, on {args.device} ({where or platform.machine()}), "
          f"torch {torch.__version__}")  # fmt: skip
    rows = {}
    for kernel in args.kernels.split(","):
        os.environ["TANDV_TB_KERNEL"] = kernel
        start = time.perf_counter()
        counted = gpt_step_dispatches(device=args.device)
        seconds = time.perf_counter() - start
        rows[kernel] = (
            counted.per_tracked_tensor,
            counted.per_hooked_tensor,
            counted.step_reads,
        )
        print(
            f"{kernel}: {counted.tracked_tensors} tracked tensors, {counted.hooked_tensors} "
            f"hooked; launches at a tracked step {len(counted.tracked.hooks.launches)} + "
            f"{len(counted.tracked.step.launches)}, at a watched step "
            f"{len(counted.watched.hooks.launches)} + {len(counted.watched.step.launches)} "
            f"({seconds:.0f} s)",
            flush=True,
        )
    print(f"{'dispatches added':28s}" + "".join(f"{k:>10s}" for k in rows) + f"{'goal':>8s}")
    for i, (label, goal) in enumerate(GOALS.items()):
        figures = "".join(f"{row[i]:10.2f}" for row in rows.values())
        print(f"{label:28s}{figures}{goal:8d}")


if __name__ == "__main__":
    main()
