"""A warm process for tests/trackers/test_crash_safety.py: imports torch and tandv_tb once,
then forks one tracked training per line read from stdin and answers each with the child's pid.

Usage: ``python tests/helpers/crash_training.py WARMUP_LOGDIR``, then lines
``<logdir> <flush_secs or "default">``. A child trains a small MLP with default tracking
into ``logdir`` and appends ``<step> <time>`` to ``<logdir>.steps`` after each ``step()``
(unbuffered, so a kill loses no line), then ``closed`` once the tracker is closed; an
exception appends ``error`` and its traceback. Killing a child is the caller's business.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback

import torch
from torch import nn

import tandv_tb.writer
from tandv_tb.torch import track

STEPS = 100
PACE = 0.02  # seconds of other work per step: a run lasts over 2 s on any machine


def train(logdir: str, flush_secs: str) -> None:
    """A tracked training of ``STEPS`` steps, logging each finished step."""
    if flush_secs != "default":
        tandv_tb.writer.FLUSH_SECS = float(flush_secs)
    log = os.open(logdir + ".steps", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        x, y = torch.randn(32, 8), torch.randn(32, 4)
        with track(model, logdir=logdir, optimizer=optimizer) as tracker:
            for step in range(STEPS):
                loss = nn.functional.mse_loss(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                tracker.step()
                os.write(log, f"{step} {time.time()}\n".encode())
                time.sleep(PACE)
        os.write(log, b"closed\n")
    except BaseException:
        os.write(log, f"error\n{traceback.format_exc()}".encode())
    finally:
        os.close(log)


def main() -> None:
    torch.set_num_threads(1)  # no thread pool to inherit across fork
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # killed children are reaped at once
    train(sys.argv[1], "default")  # warm-up, and the records of a whole run
    print("ready", flush=True)
    for line in sys.stdin:
        logdir, flush_secs = line.split()
        pid = os.fork()
        if pid == 0:
            train(logdir, flush_secs)
            os._exit(0)
        print(pid, flush=True)


if __name__ == "__main__":
    main()
