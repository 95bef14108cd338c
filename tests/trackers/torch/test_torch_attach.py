"""``tandv_tb.torch.attach``: intermediate tensors recorded where they run, with gradients."""

from __future__ import annotations

import timeit
import warnings

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import tandv_tb.torch.attaching as attach_module
from tandv_tb.torch import UntrackableTensorWarning, attach, track
from tandv_tb.torch.compiled import HOOKS_IN_GRAPH
from tests.helpers.torch_models import assert_same, expected, read_records


class Attached(nn.Module):
    """Two linears with a scaled intermediate attached between them."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.fc2 = nn.Linear(8, 4)
        self.seen: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.fc1(x)) * 3.0
        self.seen.append(h.detach().clone())
        out = attach(h, "scaled", self)
        assert out is h
        return self.fc2(out)


class Outer(nn.Module):
    def __init__(self, reentrant: bool | None = None) -> None:
        super().__init__()
        self.body = Attached()
        self.reentrant = reentrant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.reentrant is None:
            return self.body(x)
        return checkpoint(self.body, x, use_reentrant=self.reentrant)


def train(model: nn.Module, logdir, steps: int = 2, tracked: bool = True, **options):
    """SGD steps on fixed batches; returns the losses (tracked or not)."""
    torch.manual_seed(1)
    batches = [torch.randn(16, 8).requires_grad_() for _ in range(steps)]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    tracker = track(model, logdir=str(logdir), optimizer=optimizer, **options) if tracked else None
    for x in batches:
        optimizer.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().clone())
        if tracker is not None:
            tracker.step()
    if tracker is not None:
        tracker.close()
    return losses


def model(seed: int = 0, **kwargs) -> Outer:
    torch.manual_seed(seed)
    return Outer(**kwargs)


def test_attached_tensor_and_gradient_match_a_manual_capture(tmp_path):
    net = model()
    grads = []

    def capture_gradient(module, args):
        args[0].register_hook(lambda g: grads.append(g.clone()))

    net.body.fc2.register_forward_pre_hook(capture_gradient)
    train(net, tmp_path, steps=2, track_weights=False, track_optimizer=False)
    records = read_records(str(tmp_path))
    for step in (0, 1):
        stored = records["body.scaled", "Activation", step]
        assert_same(stored.record, expected(net.body.seen[step]))
        assert_same(records["body.scaled", "Gradient", step].record, expected(grads[step]))
        assert stored.module_type == ""
    # Placed where it ran: after fc1's output, before fc2's.
    order = {n: records[n, "Activation", 0].order for n in ("body.fc1", "body.scaled", "body.fc2")}
    assert order["body.fc1"] < order["body.scaled"] < order["body.fc2"]


def test_losses_are_bitwise_equal_with_and_without_attach_tracking(tmp_path):
    plain = train(model(), tmp_path / "plain", tracked=False)
    tracked = train(model(), tmp_path / "tracked")
    assert all(torch.equal(a, b) for a, b in zip(plain, tracked))


def test_untracked_steps_and_no_tracker_record_nothing(tmp_path):
    train(model(), tmp_path, steps=3, every=2)
    records = read_records(str(tmp_path))
    assert {s for n, _, s in records if n == "body.scaled"} == {0, 2}
    # Outside any tracker: the same object back, nothing registered.
    x = torch.randn(2, 2)
    assert attach(x, "free") is x
    assert attach_module._active_count == 0


def test_attach_outside_a_tracked_step_costs_a_lookup():
    """Not a timing assertion: shows the untracked path is a global read and a return."""
    x = torch.randn(2)
    per_call = min(timeit.repeat(lambda: attach(x, "a"), number=2000, repeat=3)) / 2000
    assert per_call < 1e-3  # generous: a failure here means attach does real work


def test_attached_twice_gives_one_record_covering_both(tmp_path):
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            a = attach(self.fc(x), "h", self)
            b = attach(self.fc(a), "h", self)
            return b

    torch.manual_seed(0)
    net = Twice()
    x = torch.randn(3, 4)
    with track(net, logdir=str(tmp_path), track_weights=False) as tracker:
        net(x).sum().backward()
        tracker.step()
    with torch.no_grad():
        a = net.fc(x)
        b = net.fc(a)
    records = read_records(str(tmp_path))
    assert_same(records["Twice.h", "Activation", 0].record, expected([a, b]))
    assert records["Twice.h", "Gradient", 0].record.numel == 24


@pytest.mark.parametrize("reentrant", [False, True])
def test_attach_in_a_checkpointed_block_records_like_a_plain_one(tmp_path, reentrant):
    plain = read_records_of(model(), tmp_path / "plain")
    checkpointed = read_records_of(model(reentrant=reentrant), tmp_path / "checkpointed")
    for key in ("Activation", "Gradient"):
        for step in (0, 1):
            assert_same(
                checkpointed["body.scaled", key, step].record,
                plain["body.scaled", key, step].record,
                rtol=1e-5,
            )


def read_records_of(net: nn.Module, logdir) -> dict:
    train(net, logdir, track_weights=False, track_optimizer=False)
    return read_records(str(logdir))


@pytest.mark.skipif(
    not HOOKS_IN_GRAPH, reason="this torch predates compiled tracking (test_framework_features.py)"
)
def test_attach_in_a_compiled_model_gives_the_eager_records(tmp_path):
    torch._dynamo.reset()
    eager = read_records_of(model(), tmp_path / "eager")
    compiled_losses = train(torch.compile(model(), backend="aot_eager"), tmp_path / "compiled")
    plain_losses = train(model(), tmp_path / "plain", tracked=False)
    compiled = read_records(str(tmp_path / "compiled"))
    for key in ("Activation", "Gradient"):
        for step in (0, 1):
            assert_same(
                compiled["body.scaled", key, step].record,
                eager["body.scaled", key, step].record,
                rtol=1e-5,
            )
    for a, b in zip(compiled_losses, plain_losses):
        torch.testing.assert_close(a, b)


def test_bad_tensors_are_skipped_with_one_warning_per_name(tmp_path):
    class Bad(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(2, 2)

        def forward(self, x):
            assert attach("text", "not_a_tensor") == "text"
            attach(torch.arange(3), "ints", self)
            attach(torch.empty(3, device="meta"), "meta")
            attach(x, "x", nn.Linear(1, 1))  # a module of another model
            return self.fc(x)

    net = Bad()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with track(net, logdir=str(tmp_path)) as tracker:
            for _ in range(3):
                net(torch.randn(1, 2)).sum().backward()
                tracker.step()
    messages = [str(w.message) for w in caught if w.category is UntrackableTensorWarning]
    assert len(messages) == 4, messages
    for name in ("not_a_tensor", "Bad.ints", "meta", "'x'"):
        assert sum(name in m for m in messages) == 1, (name, messages)
    names = {n for n, _, _ in read_records(str(tmp_path))}
    assert not names & {"not_a_tensor", "Bad.ints", "meta", "x"}


def test_empty_and_hostile_names_are_recorded_as_they_are(tmp_path):
    hostile = "<img src=x onerror=alert(1)>/..\\\"'"

    class Named(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(2, 2)

        def forward(self, x):
            h = attach(self.fc(x), hostile, self.fc)
            attach(h, "")
            attach(h, "", self.fc)
            return h

    net = Named()
    with track(net, logdir=str(tmp_path)) as tracker:
        net(torch.randn(1, 2)).sum().backward()
        tracker.step()
    names = {n for n, t, _ in read_records(str(tmp_path)) if t == "Activation"}
    assert {f"fc.{hostile}", attach_module.EMPTY_NAME, "fc."} <= names


def test_the_private_torch_api_that_tells_a_recomputed_forward_is_there():
    """``step_tensors.recomputing`` (used by module outputs, inputs, ``attach`` and the graph's
    recording so that a checkpointed forward is not recorded twice) reads
    ``torch._C._current_graph_task_id``."""
    assert hasattr(torch._C, "_current_graph_task_id"), (
        "torch._C._current_graph_task_id is gone: tandv_tb.torch.step_tensors.recomputing needs "
        "another way to tell a forward recomputed inside a backward pass"
    )
    from tandv_tb.torch.step_tensors import recomputing

    seen = []
    x = torch.ones(2, requires_grad=True)
    y = x * 2
    y.register_hook(lambda grad: seen.append(recomputing()))
    assert not recomputing()
    y.sum().backward()
    assert seen == [True]
