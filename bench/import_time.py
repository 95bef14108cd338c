"""Import time of the TensorBoard plugin, against TensorBoard's own scalars plugin.

Each import runs in a fresh interpreter (``python -P -c "import X"``: ``-P``, so that the
current folder does not shadow ``PYTHONPATH``), the variants interleaved,
best of ``--repeat``; also which heavy libraries each import loads. The plugin process
imports ``tandv_tb.plugin`` at start, so this is what every ``tensorboard`` launch pays.

    python bench/import_time.py [--repeat 5] [--compare DIR]

``--compare DIR`` adds the same imports from another copy of the package (``DIR`` holding a
``tandv_tb`` folder, e.g. from ``git archive``), interleaved with this one's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

MODULES = {
    "python (nothing)": "pass",
    "tensorboard scalars plugin": "import tensorboard.plugins.scalar.scalars_plugin",
    "tandv_tb.plugin": "import tandv_tb.plugin",
    "tandv_tb": "import tandv_tb",
    "NumericsPlugin (loaded at start)": "from tandv_tb.plugin.plugin import NumericsPlugin",
}
HEAVY = ("numba", "pandas", "torch", "jax", "duckdb", "pyarrow")
_REPORT = "import sys; print(','.join(m for m in {heavy!r} if m in sys.modules))"


def _env(path: str | None) -> dict[str, str] | None:
    return None if path is None else {**os.environ, "PYTHONPATH": path}


def wall_seconds(code: str, path: str | None) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-P", "-c", code], check=True, env=_env(path))
    return time.perf_counter() - start


def loaded(code: str, path: str | None) -> str:
    report = _REPORT.format(heavy=HEAVY)
    out = subprocess.run(
        [sys.executable, "-P", "-c", f"{code}\n{report}"],
        check=True,
        capture_output=True,
        text=True,
        env=_env(path),
    )
    return out.stdout.strip() or "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--compare", metavar="DIR", help="another copy of the package")
    args = parser.parse_args()
    variants = {label: (code, None) for label, code in MODULES.items()}
    if args.compare:
        for label in ("tandv_tb.plugin", "tandv_tb", "NumericsPlugin (loaded at start)"):
            variants[f"{label} (compare)"] = (MODULES[label], args.compare)
    best = dict.fromkeys(variants, float("inf"))
    for _ in range(args.repeat):  # interleaved, so a burst of load hits every variant
        for label, (code, path) in variants.items():
            best[label] = min(best[label], wall_seconds(code, path))
    baseline = best["tensorboard scalars plugin"]
    for label, (code, path) in variants.items():
        print(
            f"{label:42s} {best[label]:6.3f} s  x{best[label] / baseline:4.2f} of TensorBoard's"
            f"  heavy modules loaded: {loaded(code, path)}"
        )


if __name__ == "__main__":
    main()
