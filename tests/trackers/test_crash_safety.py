"""Crash safety: trainings tracked with default settings and killed (SIGKILL) at random
moments leave event files that TensorBoard's loader and ``read_frame`` read, missing at most
the records of the last flush interval; a writer that fails (disk full: a real ENOSPC from
the kernel) warns and lets training finish with the same losses."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import optax
import pytest
import torch
from torch import nn
from torch.utils.tensorboard import SummaryWriter

import tandv_tb.jax
import tandv_tb.torch
from tandv_tb import writer as writer_module
from tandv_tb.writer import FLUSH_SECS, WriteFailureWarning
from tests.helpers import REPO
from tests.helpers.event_checks import keys_by_step, read_checked
from tests.helpers.event_io import event_files

TRIALS = 24  # killed trainings
AT_ONCE = 4  # trainings running at the same time
KILL_WINDOW = 2.0  # seconds after a training starts (its 100 steps take over 2 s)
SHORT_FLUSH = 0.25  # flush interval of every other trial, so that the bound bites
MARGIN = 1.0  # seconds a finished step's records may still wait in the writer's queue


# --------------------------------------------------------------------- killed trainings


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    """The warm process forking the trainings (tests/helpers/crash_training.py), and its root."""
    root = tmp_path_factory.mktemp("killed")
    process = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "tests" / "helpers" / "crash_training.py"),
            str(root / "whole"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert process.stdout.readline().strip() == "ready"
        yield process, root
    finally:
        process.stdin.close()
        process.wait(timeout=60)


def start(trainer, logdir: Path, flush: str) -> int:
    process, _ = trainer
    process.stdin.write(f"{logdir} {flush}\n")
    process.stdin.flush()
    return int(process.stdout.readline())


def kill(pid: int) -> float:
    """SIGKILL ``pid`` (unless it already ended), wait until it is gone; the kill's time."""
    killed_at = time.time()
    try:
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            os.kill(pid, 0)  # ProcessLookupError once the kernel has reaped it
            time.sleep(0.01)
        raise AssertionError(f"process {pid} still alive 30 s after SIGKILL")
    except ProcessLookupError:
        return killed_at


def finished_steps(logdir: Path) -> tuple[dict[int, float], bool]:
    """The steps the training finished (``step -> time``) and whether it closed."""
    log = logdir.with_name(logdir.name + ".steps")
    lines = log.read_text().splitlines() if log.exists() else []
    assert "error" not in lines, log.read_text()
    steps = {int(s): float(t) for s, t in (line.split() for line in lines if line != "closed")}
    return steps, "closed" in lines


def check_trial(logdir: Path, flush: float, killed_at: float, whole: set) -> str:
    """Assert what a killed training left; how far it got ('before', 'during', 'after')."""
    steps, closed = finished_steps(logdir)
    if not logdir.exists():
        assert not steps
        return "before"
    stored = keys_by_step(read_checked(logdir))
    # Steps are written in order, one event each: whole steps, then at most a torn one.
    assert sorted(stored) == list(range(len(stored))), sorted(stored)
    for step in sorted(stored)[:-1]:
        assert stored[step] == whole, f"step {step} is incomplete in {logdir}"
    if stored:
        assert stored[max(stored)] <= whole
        assert max(stored) <= max(steps, default=-1) + 1  # at most the step in progress
    must = set(steps) if closed else {s for s, t in steps.items() if t < killed_at - flush - MARGIN}
    missing = sorted(s for s in must if stored.get(s) != whole)
    assert not missing, f"{logdir}: steps {missing} finished long before the kill are lost"
    return "after" if closed else ("during" if steps else "before")


@pytest.mark.slow
def test_trainings_killed_at_random_moments_leave_readable_files(trainer):
    _, root = trainer
    whole_run = keys_by_step(read_checked(root / "whole"))
    assert sorted(whole_run) == list(range(100))
    whole = whole_run[0]
    assert len(whole) == 24 and all(keys == whole for keys in whole_run.values())

    rng = random.Random(1234)
    trials = [
        (root / f"trial{i}", "default" if i % 2 == 0 else str(SHORT_FLUSH)) for i in range(TRIALS)
    ]
    killed = []
    for first in range(0, TRIALS, AT_ONCE):
        running = []
        for logdir, flush in trials[first : first + AT_ONCE]:
            pid = start(trainer, logdir, flush)
            running.append((time.monotonic() + rng.uniform(0, KILL_WINDOW), pid, logdir, flush))
        for kill_time, pid, logdir, flush in sorted(running):
            time.sleep(max(0.0, kill_time - time.monotonic()))
            killed.append((logdir, FLUSH_SECS if flush == "default" else float(flush), kill(pid)))

    outcomes = [check_trial(logdir, flush, at, whole) for logdir, flush, at in killed]
    # The random moments covered training itself, often, and with the short interval.
    assert outcomes.count("during") >= TRIALS // 3, outcomes
    assert "during" in outcomes[1::2], outcomes


# ------------------------------------------------------------------------ a full disk


def fill_disk(event_file: Path, keep: Path) -> None:
    """From now on, writes to ``event_file`` fail with the kernel's ENOSPC: its name leads
    to /dev/full; what it held is kept in ``keep`` (outside the logdir)."""
    keep.mkdir(exist_ok=True)
    shutil.move(event_file, keep / event_file.name)
    event_file.symlink_to("/dev/full")


def free_disk(event_file: Path, keep: Path) -> None:
    event_file.unlink()
    shutil.move(keep / event_file.name, event_file)


# A user's SummaryWriter: its writer thread ends with the disk's error (and then raises it).
THREAD_DIES = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")


def failure_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, WriteFailureWarning)]


def torch_losses(steps: int, on_step=lambda step, tracker: None, **tracking) -> list[float]:
    """Losses of a small MLP's training, tracked where ``tracking`` has options."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = torch.randn(32, 8), torch.randn(32, 4)
    tracker = tandv_tb.torch.track(model, optimizer=optimizer, **tracking) if tracking else None
    losses = []
    for step in range(steps):
        on_step(step, tracker)
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if tracker is not None:
            tracker.step()
        losses.append(loss.item())
    if tracker is not None:
        tracker.close()
    return losses


def jax_losses(steps: int, on_step=lambda step, tracker: None, **tracking) -> list[float]:
    """Losses of a small linear model's training with optax, tracked where asked."""
    params = {"w": jnp.full((8, 4), 0.1), "b": jnp.zeros(4)}
    x = jax.random.normal(jax.random.PRNGKey(0), (32, 8))
    y = jax.random.normal(jax.random.PRNGKey(1), (32, 4))
    optimizer = optax.adam(1e-2)
    opt_state = optimizer.init(params)

    @jax.jit
    def update(params, opt_state):
        loss, grads = jax.value_and_grad(lambda p: jnp.mean((x @ p["w"] + p["b"] - y) ** 2))(params)
        updates, opt_state = optimizer.update(grads, opt_state)
        return loss, grads, optax.apply_updates(params, updates), opt_state

    tracker = tandv_tb.jax.track(params, opt_state, **tracking) if tracking else None
    losses = []
    for step in range(steps):
        on_step(step, tracker)
        loss, grads, params, opt_state = update(params, opt_state)
        if tracker is not None:
            tracker.step(params, opt_state, grads)
        losses.append(float(loss))
    if tracker is not None:
        tracker.close()
    return losses


@pytest.mark.parametrize("losses", [torch_losses, jax_losses], ids=["torch", "jax"])
def test_a_full_disk_warns_and_training_goes_on_then_writing_resumes(tmp_path, monkeypatch, losses):
    """Steps 0-2 written; the disk is full for steps 3-5 (one warning, records dropped);
    after ``RETRY_SECS`` a new event file takes steps 6-9 (a second warning says so)."""
    monkeypatch.setattr(writer_module, "RETRY_SECS", 0.5)
    logdir, keep = tmp_path / "run", tmp_path / "keep"

    def disk(step: int, tracker) -> None:
        if step == 3:
            tracker.flush()
            (event_file,) = event_files(logdir)
            fill_disk(event_file, keep)
        if step == 6:
            time.sleep(0.6)  # RETRY_SECS passed: the next record tries a new file

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = losses(10, disk, logdir=logdir)
    assert got == losses(10)
    messages = failure_warnings(caught)
    assert len(messages) == 2, messages
    assert str(logdir) in messages[0] and "No space left on device" in messages[0]
    assert "again" in messages[1] and "dropped" in messages[1]

    (failed,) = (p for p in event_files(logdir) if p.is_symlink())
    free_disk(failed, keep)
    stored = keys_by_step(read_checked(logdir))
    assert sorted(stored) == [0, 1, 2, 6, 7, 8, 9]
    assert all(keys == stored[0] for keys in stored.values())  # the new file has names too


@THREAD_DIES
def test_a_failed_user_writer_warns_once_and_training_goes_on(tmp_path, monkeypatch):
    """A user's SummaryWriter whose file fills up is dead for good (its writer thread
    ended): one warning, later retries fail quietly, training finishes."""
    monkeypatch.setattr(writer_module, "RETRY_SECS", 0.2)
    logdir, keep = tmp_path / "run", tmp_path / "keep"
    user = SummaryWriter(logdir)

    def disk(step: int, tracker) -> None:
        if step == 3:
            tracker.flush()
            (event_file,) = event_files(logdir)
            fill_disk(event_file, keep)
        if step in (5, 7):
            time.sleep(0.3)  # retries are due

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = torch_losses(10, disk, writer=user)
    assert got == torch_losses(10)
    messages = failure_warnings(caught)
    assert len(messages) == 1, messages
    assert str(logdir) in messages[0] and "No space left on device" in messages[0]
    with contextlib.suppress(OSError):  # the user's own writer reports its failure
        user.close()
    (failed,) = event_files(logdir)
    free_disk(failed, keep)
    assert sorted(keys_by_step(read_checked(logdir))) == [0, 1, 2]
