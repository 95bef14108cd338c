"""Import time of the TensorBoard plugin, against TensorBoard's own scalars plugin.

Each import runs in a fresh interpreter (``python -c "import X"``), the variants interleaved,
best of ``--repeat``; also which heavy libraries each import loads. The plugin process
imports ``tandv_tb.plugin`` at start, so this is what every ``tensorboard`` launch pays.

    python bench/import_time.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

MODULES = {
    "python (nothing)": "pass",
    "tensorboard scalars plugin": "import tensorboard.plugins.scalar.scalars_plugin",
    "tandv_tb.plugin": "import tandv_tb.plugin",
    "tandv_tb": "import tandv_tb",
}
HEAVY = ("numba", "pandas", "torch", "jax", "duckdb", "pyarrow")
_REPORT = "import sys; print(','.join(m for m in {heavy!r} if m in sys.modules))"


def wall_seconds(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - start


def loaded(code: str) -> str:
    report = _REPORT.format(heavy=HEAVY)
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\n{report}"], check=True, capture_output=True, text=True
    )
    return out.stdout.strip() or "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    best = dict.fromkeys(MODULES, float("inf"))
    for _ in range(args.repeat):  # interleaved, so a burst of load hits every variant
        for label, code in MODULES.items():
            best[label] = min(best[label], wall_seconds(code))
    baseline = best["tensorboard scalars plugin"]
    for label, code in MODULES.items():
        print(
            f"{label:28s} {best[label]:6.3f} s  x{best[label] / baseline:4.2f} of TensorBoard's"
            f"  heavy modules loaded: {loaded(code)}"
        )


if __name__ == "__main__":
    main()
