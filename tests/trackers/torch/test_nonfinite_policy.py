"""``on_nonfinite``: the PyTorch tracker acts on the first NaN/Inf of a real small training,
eager and compiled, on tracked and untracked steps; read back from disk."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tandv_tb
from tandv_tb import NonFiniteError, NonFiniteWarning, StepReport
from tandv_tb.event_files.nonfinite import read_nonfinite
from tandv_tb.torch import track

POISONED_STEP = 7
STEPS = 10


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(6, 8)
        self.hidden = nn.Linear(8, 8)
        self.out = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(torch.relu(self.inp(x)))))


def _poisoned_net() -> tuple[Net, torch.Tensor]:
    """A net whose ``hidden`` output is multiplied by a factor (1, or inf at the poisoned
    step) by a forward hook; the factor is a tensor, so a compiled graph does not change."""
    torch.manual_seed(0)
    net = Net()
    factor = torch.ones(())
    net.hidden.register_forward_hook(lambda module, args, output: output * factor)
    return net, factor


def _state(net: nn.Module, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Every weight and optimizer state tensor, copied."""
    tensors = [p.detach().clone() for p in net.parameters()]
    for state in optimizer.state.values():
        tensors += [v.clone() for v in state.values() if isinstance(v, torch.Tensor)]
    return tensors


def _bitwise_equal(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(
        x.dtype == y.dtype and torch.equal(x.view(torch.int32), y.view(torch.int32))
        for x, y in zip(a, b)
    )


def _closure(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor):
    """A step's closure: zero_grad, forward, backward; the loss."""

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        return loss

    return closure


def _train(logdir, *, compiled=False, stop_at=None, tracked=True, closure=False, **options):
    """Train ``STEPS`` steps with the hidden layer's output poisoned at ``POISONED_STEP``;
    the reports, the losses, the state before the poisoned step and the error raised.
    ``closure``: each step is ``optimizer.step(closure)``."""
    net, factor = _poisoned_net()
    model = torch.compile(net) if compiled else net
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    batches = [torch.randn(4, 6, generator=torch.Generator().manual_seed(i)) for i in range(STEPS)]
    reports, losses, before, error = [], [], None, None
    tracker = track(model, logdir=str(logdir), optimizer=optimizer, **options) if tracked else None
    try:
        for step, x in enumerate(batches):
            if step == POISONED_STEP:
                factor.fill_(float("inf"))
                before = _state(net, optimizer)
            else:
                factor.fill_(1.0)
            if closure:
                loss = optimizer.step(_closure(model, optimizer, x))
            else:
                loss = model(x).pow(2).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            losses.append(loss.detach().clone())
            if tracker is not None:
                reports.append(tracker.step())
    except NonFiniteError as raised:
        error = raised
    after = _state(net, optimizer)
    if tracker is not None:
        tracker.close()
    return reports, losses, before, after, error


@pytest.mark.parametrize("kernel", ["cpu", "array"])
@pytest.mark.parametrize("every", [1, 10], ids=["tracked", "untracked"])
def test_raise_stops_before_the_update(tmp_path, monkeypatch, every, kernel):
    """Also with the kernel of a device (``array``): the watch's counts and the step's
    statistics stay where they were computed until the optimizer's step reads them."""
    monkeypatch.setenv("TANDV_TB_KERNEL", kernel)
    reports, losses, before, after, error = _train(tmp_path, every=every, on_nonfinite="raise")
    assert error is not None, "no NonFiniteError"
    report = error.report
    assert (report.step, report.name, report.tensor_type) == (POISONED_STEP, "hidden", "Activation")
    assert report.direction == "forward" and report.nonfinite
    assert report.nan + report.posinf + report.neginf > 0
    assert f"step {POISONED_STEP}" in str(error) and "'hidden'" in str(error)
    assert len(reports) == POISONED_STEP and not any(r.nonfinite for r in reports)
    assert all(r.checked for r in reports)
    # The optimizer never applied the poisoned step: weights and Adam's state as before.
    assert _bitwise_equal(before, after)
    assert all(torch.isfinite(t).all() for t in after)
    # The stop is on disk, flushed: the step's entries, marked stopped.
    (stopped,) = read_nonfinite(tmp_path)
    assert stopped.step == POISONED_STEP and stopped.stopped
    assert (stopped.entries[0].tensor_type, stopped.entries[0].name) == ("Activation", "hidden")
    found = tandv_tb.findings(tmp_path)
    first = found[found.kind == "nonfinite"].iloc[0]
    assert first.step == POISONED_STEP and first["name"] == "hidden"
    assert "training was stopped" in first.message


def test_raise_stops_before_the_update_without_tracking_weights(tmp_path):
    """The optimizer's step is where the counts are read even when it reads no gradients."""
    _, _, before, after, error = _train(
        tmp_path, every=10, track_weights=False, on_nonfinite="raise"
    )
    assert error is not None and (error.report.step, error.report.name) == (7, "hidden")
    assert _bitwise_equal(before, after)


@pytest.mark.parametrize("every", [1, 10], ids=["tracked", "untracked"])
def test_raise_stops_a_step_given_a_closure_before_the_update(tmp_path, every):
    """``optimizer.step(closure)`` runs its pre-hooks before the closure's forward and
    backward: the counts are read when the closure returns, before the update."""
    _, losses, before, after, error = _train(
        tmp_path, every=every, closure=True, on_nonfinite="raise"
    )
    assert error is not None
    assert (error.report.step, error.report.name) == (POISONED_STEP, "hidden")
    assert _bitwise_equal(before, after)
    _, plain, _, _, _ = _train(tmp_path / "plain", closure=True, tracked=False)
    assert torch.equal(torch.stack(losses), torch.stack(plain[:POISONED_STEP]))


@pytest.mark.slow
@pytest.mark.parametrize("every", [1, 10], ids=["tracked", "untracked"])
def test_raise_stops_a_compiled_model_before_the_update(tmp_path, every):
    _, _, before, after, error = _train(tmp_path, compiled=True, every=every, on_nonfinite="raise")
    assert error is not None
    assert (error.report.step, error.report.name) == (POISONED_STEP, "hidden")
    assert error.report.tensor_type == "Activation"
    assert _bitwise_equal(before, after)


def test_record_reports_and_changes_nothing(tmp_path):
    reports, losses, _, after, error = _train(tmp_path / "tracked", every=10)
    _, plain_losses, _, plain_after, _ = _train(tmp_path / "plain", tracked=False)
    assert error is None and len(reports) == STEPS
    assert all(isinstance(r, StepReport) for r in reports)
    assert not any(r.nonfinite for r in reports[:POISONED_STEP])
    poisoned = reports[POISONED_STEP]
    assert (poisoned.step, poisoned.name) == (POISONED_STEP, "hidden")
    assert poisoned.direction == "forward"
    # Training goes on, bitwise as without the tracker.
    assert _bitwise_equal(losses, plain_losses) and _bitwise_equal(after, plain_after)
    assert not any(s.stopped for s in read_nonfinite(tmp_path / "tracked"))


def test_warn_once_per_run(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reports, *_ = _train(tmp_path, every=10, on_nonfinite="warn")
    ours = [w for w in caught if issubclass(w.category, NonFiniteWarning)]
    assert len(ours) == 1, [str(w.message) for w in ours]
    assert f"step {POISONED_STEP}" in str(ours[0].message) and "'hidden'" in str(ours[0].message)
    assert ours[0].filename == __file__  # points at the training loop's step()
    assert sum(r.nonfinite for r in reports) > 1  # later steps hold NaN too: still one warning


def test_a_callable_gets_the_report_and_its_error_propagates(tmp_path):
    seen = []

    class Stop(Exception):
        pass

    def policy(report):
        seen.append(report)
        raise Stop

    net, factor = _poisoned_net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    tracker = track(net, logdir=str(tmp_path), optimizer=optimizer, on_nonfinite=policy)
    factor.fill_(float("inf"))
    net(torch.randn(2, 6)).sum().backward()
    optimizer.step()
    with pytest.raises(Stop):
        tracker.step()
    # Flushed before the policy ran: the step is on disk while the tracker is still open.
    assert [s.step for s in read_nonfinite(tmp_path)] == [0]
    assert len(seen) == 1 and seen[0].name == "hidden"
    tracker.close()


def test_step_after_a_caught_error_moves_on(tmp_path):
    net, factor = _poisoned_net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    with track(net, logdir=str(tmp_path), optimizer=optimizer, on_nonfinite="raise") as tracker:
        factor.fill_(float("inf"))
        net(torch.randn(2, 6)).sum().backward()
        with pytest.raises(NonFiniteError):
            optimizer.step()
        stopped = tracker.step()  # the stopped step's report; the step is written already
        assert stopped.nonfinite and (stopped.step, stopped.name) == (0, "hidden")
        assert tracker.current_step == 1
        factor.fill_(1.0)
        optimizer.zero_grad()
        net(torch.randn(2, 6)).sum().backward()
        optimizer.step()
        assert not tracker.step().nonfinite
    assert [s.step for s in read_nonfinite(tmp_path)] == [0]


def test_bad_policies_are_refused(tmp_path):
    net = Net()
    with pytest.raises(ValueError, match="'record', 'warn', 'raise'"):
        track(net, logdir=str(tmp_path), on_nonfinite="stop")
    with pytest.raises(ValueError, match="watch_nonfinite=True"):
        track(net, logdir=str(tmp_path), on_nonfinite="raise", watch_nonfinite=False)
    assert not list(tmp_path.iterdir())  # nothing hooked or written
