"""Train the demo runs into a logdir (``make demo`` then serves it with TensorBoard).

Runs (each skipped when its ``.done`` marker exists, so a second ``make demo`` reuses them):
- ``torch/lr_3e-3``: a small GPT-style byte model, healthy learning rate;
- ``torch/lr_2e-1``: the same model whose only difference is a large learning rate: its
  residual activations grow past 10^4, out of float8_e4m3fn's range (448) and close to
  float8_e5m2's (57344), and its loss stalls;
- ``jax/lr_3e-3``: the same kind of model in Flax, tracked under ``jax.jit``;
- ``tandv_import``: a logframe in tandv's own format, written with ``write_frame``.

    python demo/make_demo.py --logdir demo/runs [--steps 300] [--every 5]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from demo.corpus import stdlib_bytes  # noqa: E402

RUNS = {
    "torch/lr_3e-3": ("torch", 3e-3),
    "torch/lr_2e-1": ("torch", 2e-1),
    "jax/lr_3e-3": ("jax", 3e-3),
}


def train_run(kind: str, logdir: pathlib.Path, data, lr: float, steps: int, every: int):
    if kind == "torch":
        from demo.gpt_torch import train
    else:
        from demo.gpt_jax import train
    train(logdir, data, lr=lr, steps=steps, every=every)


def import_tandv_frame(source: pathlib.Path, logdir: pathlib.Path) -> None:
    """Build a frame in tandv's own format (its columns and tensor-type names) from the
    numerics of ``source``, pickle it as tandv does, and write it back with write_frame."""
    import tandv_tb

    frame = tandv_tb.to_tandv(tandv_tb.read_frame(source))
    pickle = logdir.parent / "tandv_logframe.pkl"
    logdir.parent.mkdir(parents=True, exist_ok=True)
    frame.to_pickle(pickle)
    tandv_tb.write_frame(pickle, logdir)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logdir", type=pathlib.Path, default=pathlib.Path("demo/runs"))
    parser.add_argument("--steps", type=int, default=250)
    parser.add_argument("--every", type=int, default=5)
    args = parser.parse_args(argv)
    data = stdlib_bytes()
    for name, (kind, lr) in RUNS.items():
        run = args.logdir / name
        if (run / ".done").exists():
            print(f"{name}: already trained, reused")
            continue
        start = time.perf_counter()
        train_run(kind, run, data, lr, args.steps, args.every)
        (run / ".done").touch()
        print(f"{name}: trained {args.steps} steps in {time.perf_counter() - start:.0f} s")
    imported = args.logdir / "tandv_import"
    if not (imported / ".done").exists():
        import_tandv_frame(args.logdir / "torch" / "lr_3e-3", imported)
        (imported / ".done").touch()
    print(f"demo runs ready in {args.logdir}")


if __name__ == "__main__":
    main()
