"""Concurrency: two trackers in one process, trained in two threads into two runs; a tracker
and the user's ``add_scalar`` sharing one ``SummaryWriter`` from two threads; one
``NumericsWriter`` fed by several threads. Every record decodes, each run holds exactly its
own model's names and steps, and no scalar is lost."""

from __future__ import annotations

import sys
import threading

import numpy as np
import torch
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.util.tensor_util import make_ndarray
from torch import nn
from torch.utils.tensorboard import SummaryWriter

from tandv_tb import NumericsWriter
from tandv_tb.torch import track
from tests.helpers.event_checks import keys_by_step, read_checked
from tests.helpers.event_io import event_files
from tests.helpers.tracker_records import read_records


class Encoder(nn.Module):
    """A model whose names differ from a ``Sequential``'s."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 12)
        self.head = nn.Linear(12, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.embed(x)))


MODELS = {
    "mlp": lambda: nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)),
    "encoder": Encoder,
}
STEPS = {"mlp": 12, "encoder": 8}
# torch's global RNG is one for all threads: two threads seeding it at once mix their models
_GLOBAL_RNG = threading.Lock()


def train(kind: str, on_step=lambda step: None, **tracking) -> None:
    """``STEPS[kind]`` tracked steps of a ``MODELS[kind]``, seeded per kind."""
    generator = torch.Generator().manual_seed(len(kind))
    with _GLOBAL_RNG, torch.random.fork_rng():  # modules initialise from torch's global RNG
        torch.manual_seed(len(kind))
        model = MODELS[kind]()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    x = torch.randn(16, 8, generator=generator)
    y = torch.randn(16, 4, generator=generator)
    with track(model, optimizer=optimizer, **tracking) as tracker:
        for step in range(STEPS[kind]):
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            tracker.step()
            on_step(step)


def in_threads(*jobs) -> None:
    """Run every job in its own thread, started together and switching threads as often as
    the interpreter can (to bring races out); re-raise the first error."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(jobs))

    def run(job) -> None:
        try:
            barrier.wait()
            job()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
    finally:
        sys.setswitchinterval(interval)
    assert not any(thread.is_alive() for thread in threads)
    if errors:
        raise errors[0]


def same_records(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key, stored in want.items():
        assert got[key].record.statistics == stored.record.statistics, key
        assert np.array_equal(got[key].record.counts, stored.record.counts), key
        assert got[key].order == stored.order, key


def test_two_trackers_in_two_threads_write_their_own_runs(tmp_path):
    for kind in MODELS:
        train(kind, logdir=tmp_path / "alone" / kind)
    in_threads(*(lambda k=kind: train(k, logdir=tmp_path / "together" / k) for kind in MODELS))

    for kind in MODELS:
        alone = keys_by_step(read_checked(tmp_path / "alone", run=kind))
        together = keys_by_step(read_checked(tmp_path / "together", run=kind))
        assert sorted(together) == list(range(STEPS[kind]))
        assert together == alone
        same_records(
            read_records(str(tmp_path / "together" / kind)),
            read_records(str(tmp_path / "alone" / kind)),
        )
    names = [
        {
            name
            for keys in keys_by_step(read_checked(tmp_path / "together", run=k)).values()
            for name, _ in keys
        }
        for k in MODELS
    ]
    assert "Sequential" in names[0] and "embed" in names[1]


def test_a_tracker_and_add_scalar_share_a_writer_from_two_threads(tmp_path):
    scalars = 500
    user = SummaryWriter(tmp_path / "shared")

    def add_scalars() -> None:
        for i in range(scalars):
            user.add_scalar("loss/other_thread", float(i), i)

    def training() -> None:
        train(
            "mlp",
            on_step=lambda step: user.add_scalar("loss/tracker_thread", step, step),
            writer=user,
        )

    in_threads(training, add_scalars)
    user.close()

    train("mlp", logdir=tmp_path / "alone")
    numerics = keys_by_step(read_checked(tmp_path / "shared"))
    assert numerics == keys_by_step(read_checked(tmp_path / "alone"))
    same_records(read_records(str(tmp_path / "shared")), read_records(str(tmp_path / "alone")))
    values: dict[str, dict[int, float]] = {}
    (path,) = event_files(tmp_path / "shared")
    for event in EventFileLoader(str(path)).Load():
        for value in event.summary.value:
            if value.tag.startswith("loss/"):
                values.setdefault(value.tag, {})[event.step] = make_ndarray(value.tensor).item()
    assert values["loss/other_thread"] == {i: float(i) for i in range(scalars)}
    assert values["loss/tracker_thread"] == {i: float(i) for i in range(STEPS["mlp"])}


def test_one_numerics_writer_fed_by_four_threads(tmp_path):
    """Many new tags at once (each takes the next order) and many records per tag."""
    steps, names = 5, 60
    rng = np.random.default_rng(0)
    tensors = {
        f"thread{t}.x{j}": rng.normal(size=16).astype(np.float32)
        for t in range(4)
        for j in range(names)
    }
    writer = NumericsWriter(tmp_path)

    def feed(thread: int) -> None:
        for step in range(steps):
            for j in range(names):
                name = f"thread{thread}.x{j}"
                writer.add_numerics(name, tensors[name] * (step + 1), step)

    in_threads(*(lambda t=t: feed(t) for t in range(4)))
    writer.close()
    records = read_records(str(tmp_path))
    assert set(records) == {(n, "Activation", s) for n in tensors for s in range(steps)}
    orders = {name: stored.order for (name, _, _), stored in records.items()}
    assert sorted(orders.values()) == list(range(len(tensors)))
    for (name, _, step), stored in records.items():
        assert stored.record.numel == 16
        want = float(np.max(np.abs(tensors[name].astype(np.float64) * (step + 1))))
        assert np.isclose(stored.record.statistics["max_abs"], want, rtol=1e-6), (name, step)
