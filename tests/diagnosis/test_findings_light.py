"""``tandv-tb findings`` on a store already built loads neither pandas nor numba (about
1 s of CPU each to start), and says what it said when it built the store."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch
from torch import nn

from tests.helpers import REPO
from tests.helpers.torch_models import train

HEAVY = ("pandas", "numba", "scipy", "torch", "jax")
_RUN = (
    "import json, sys\n"
    "from tandv_tb.diagnosis.cli import main\n"
    "status = main(sys.argv[1:])\n"
    "print(json.dumps([m for m in {heavy!r} if m in sys.modules]), file=sys.stderr)\n"
    "sys.exit(status)\n"
)


def _findings(logdir, cache) -> tuple[list[dict], list[str]]:
    """The findings as JSON and the heavy modules the process loaded."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(cache)}
    done = subprocess.run(
        [sys.executable, "-c", _RUN.format(heavy=HEAVY), "findings", str(logdir), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout), json.loads(done.stderr.splitlines()[-1])


def test_findings_on_a_built_store_load_neither_pandas_nor_numba(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    logdir = tmp_path / "logs"
    train(
        model,
        logdir,
        6,
        loss_fn=lambda out, s: 1e-9 * out.pow(2).mean(),
        formats=("float8_e5m2",),
    )
    building, _ = _findings(logdir, tmp_path / "cache")  # reads the event files
    built, loaded = _findings(logdir, tmp_path / "cache")
    assert loaded == []
    assert built == building
    # the scale estimate read stored vectors (histograms), and the casts were read
    assert {"underflow", "scale"} <= {f["kind"] for g in built for f in g["findings"]}
