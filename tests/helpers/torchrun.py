"""A test file run under ``torchrun`` (gloo, on the CPU), and what each rank saved."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from tests.helpers import REPO


def run_ranks(script: str, logdir: Path, ranks: int) -> list[dict]:
    """Run ``script logdir`` on ``ranks`` processes; each saves ``logdir/rank<k>.pt``."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += [f"--nproc_per_node={ranks}", script, str(logdir)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [torch.load(logdir / f"rank{k}.pt", weights_only=False) for k in range(ranks)]
