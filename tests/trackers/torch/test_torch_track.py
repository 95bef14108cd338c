"""``tandv_tb.torch.track`` on real small models: what is recorded, under which names."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from torch import nn

from tandv_tb.torch import UntrackableTensorWarning, track
from tests.helpers.reference import assert_record_matches
from tests.helpers.torch_models import (
    ADAM_TYPES,
    GPT,
    Block,
    assert_same,
    expected,
    gpt_loss,
    read_records,
)


def capture(model: nn.Module, names: dict[nn.Module, str]):
    """Manual capture: every module output and its gradient, by plain hooks."""
    outputs, grads, handles = {}, {}, []

    def on_output(name, module, args, output):
        outputs.setdefault(name, []).append(output.detach().clone())
        if output.requires_grad:
            output.register_hook(lambda g: grads.setdefault(name, []).append(g.clone()))

    for module, name in names.items():
        handles.append(module.register_forward_hook(functools.partial(on_output, name)))
    return outputs, grads, handles


def test_resnet_block_inplace_activations_and_gradients_match_manual_capture(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), Block(), Block())
    x = torch.randn(16, 8)
    names = {m: n or "Sequential" for n, m in model.named_modules()}
    outputs, grads, handles = capture(model, names)
    with track(model, logdir=str(tmp_path), track_weights=False) as tracker:
        model(x).square().mean().backward()
        tracker.step()
    for handle in handles:
        handle.remove()
    records = read_records(str(tmp_path))
    assert {name for name, _, _ in records} == set(names.values())
    for name in names.values():
        assert_same(records[name, "Activation", 0].record, expected(outputs[name]))
        assert_same(records[name, "Gradient", 0].record, expected(grads[name]))
    # The in-place ReLU runs twice per block: one record covering both calls.
    assert records["1.relu", "Activation", 0].record.numel == 2 * 16 * 8
    assert records["1.bn2", "Activation", 0].module_type == "BatchNorm1d"


def test_gpt_decoder_records_every_tensor_type(tmp_path):
    torch.manual_seed(0)
    model = GPT()
    optimizer = torch.optim.AdamW(model.parameters())
    with track(model, logdir=str(tmp_path), optimizer=optimizer) as tracker:
        for _ in range(2):
            loss = gpt_loss(model, torch.randint(0, 64, (4, 17)))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            tracker.step()
    records = read_records(str(tmp_path))
    types = {t for _, t, _ in records}
    assert types == ADAM_TYPES
    assert {step for _, _, step in records} == {0, 1}
    # Weights and optimizer state are read at step(), after the update.
    for name, p in model.named_parameters():
        assert_same(records[name, "Weight", 1].record, expected(p))
        assert_same(records[name, "Weight_Gradient", 1].record, expected(p.grad))
        state = optimizer.state[p]
        assert_same(records[name, "Optimiser_State.exp_avg", 1].record, expected(state["exp_avg"]))
    # MultiheadAttention returns (output, None): one record, under the module's name.
    assert ("blocks.0.attn", "Activation", 0) in records
    assert not any(name.startswith("blocks.0.attn.") for name, t, _ in records if t == "Gradient")
    # Layers are listed by first execution; parameters by registration.
    orders = {name: s.order for (name, t, step), s in records.items() if t == "Activation"}
    assert orders["embed"] < orders["blocks.0.ln1"] < orders["blocks.1.mlp.0"] < orders["head"]
    assert orders["GPT"] == max(orders.values())
    weight_orders = [records[n, "Weight", 0].order for n, _ in model.named_parameters()]
    assert weight_orders == sorted(weight_orders)


@pytest.mark.parametrize(
    "make_optimizer, keys",
    [
        (lambda ps: torch.optim.Adam(ps), {"exp_avg", "exp_avg_sq"}),
        (
            lambda ps: torch.optim.Adam(ps, amsgrad=True),
            {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"},
        ),
        (lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), {"momentum_buffer"}),
        (lambda ps: torch.optim.Adagrad(ps), {"sum"}),
        (lambda ps: torch.optim.RMSprop(ps, momentum=0.5), {"square_avg", "momentum_buffer"}),
    ],
)
def test_optimizer_state_matches_optimizer_state(tmp_path, make_optimizer, keys):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    optimizer = make_optimizer(model.parameters())
    with track(model, logdir=str(tmp_path), optimizer=optimizer, track_activations=False) as t:
        for _ in range(2):
            optimizer.zero_grad()
            model(torch.randn(5, 4)).pow(2).sum().backward()
            optimizer.step()
            t.step()
    records = read_records(str(tmp_path))
    for name, p in model.named_parameters():
        for key in keys:
            want = optimizer.state[p][key]
            assert_same(records[name, f"Optimiser_State.{key}", 1].record, expected(want))
    recorded = {t.removeprefix("Optimiser_State.") for _, t, _ in records if "Optimiser" in t}
    assert recorded == keys  # scalar entries such as ``step`` are skipped


class Shared(nn.Module):
    """One Linear used twice in a forward (shared weights)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(torch.tanh(self.lin(x)))


def test_module_called_several_times_gives_one_exact_record(tmp_path):
    torch.manual_seed(0)
    model = Shared()
    outputs, grads, handles = capture(model, {model.lin: "lin"})
    with track(model, logdir=str(tmp_path)) as tracker:
        # two forward passes (shared module called twice in each) before one backward
        loss = model(torch.randn(3, 4)).sum() + model(torch.randn(5, 4)).square().sum()
        loss.backward()
        tracker.step()
    records = read_records(str(tmp_path))
    assert records["lin", "Activation", 0].record.numel == (3 + 3 + 5 + 5) * 4
    assert_same(records["lin", "Activation", 0].record, expected(outputs["lin"]))
    assert_same(records["lin", "Gradient", 0].record, expected(grads["lin"]))


def test_gradient_accumulation_merges_micro_batches(tmp_path):
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    outputs, grads, handles = capture(model, {model: "Linear"})
    with track(model, logdir=str(tmp_path)) as tracker:
        for _ in range(3):
            model(torch.randn(2, 4)).sum().backward()
        tracker.step()
    records = read_records(str(tmp_path))
    assert_same(records["Linear", "Gradient", 0].record, expected(grads["Linear"]))
    assert records["Linear", "Gradient", 0].record.numel == 3 * 2 * 3
    assert_same(records["weight", "Weight_Gradient", 0].record, expected(model.weight.grad))


class Recurrent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 6, batch_first=True)
        self.head = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor, *, scale: float = 1.0) -> dict[str, torch.Tensor]:
        out, (h, c) = self.lstm(x)
        return {"logits": self.head(out) * scale, "state": h, "index": out.argmax(-1)}


def test_nested_tuple_dict_outputs_kwargs_and_integer_outputs(tmp_path):
    torch.manual_seed(0)
    model = Recurrent()
    out, (h, c) = model.lstm(x := torch.randn(2, 5, 4))
    with track(model, logdir=str(tmp_path)) as tracker, pytest.warns(UntrackableTensorWarning):
        result = model(x, scale=2.0)
        (result["logits"].sum() + result["state"].sum()).backward()
        tracker.step()
    records = read_records(str(tmp_path))
    activations = {name for name, t, _ in records if t == "Activation"}
    assert activations == {
        "lstm",
        "lstm.1",
        "lstm.2",
        "head",
        "Recurrent.logits",
        "Recurrent.state",
    }
    assert_same(records["lstm", "Activation", 0].record, expected(out))
    assert_same(records["lstm.2", "Activation", 0].record, expected(c))
    # c gets no gradient from this loss: no Gradient record for it.
    assert ("lstm.2", "Gradient", 0) not in records
    assert ("lstm.1", "Gradient", 0) in records


class Odd(nn.Module):
    """Outputs that cannot be tracked beside one that can."""

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {
            "index": x.argmax(-1),
            "sparse": (x * 3).to_sparse(),
            "meta": torch.empty(2, device="meta"),
            "ok": x * 2,
        }


def test_untrackable_outputs_warn_once_per_name_and_training_goes_on(tmp_path, recwarn):
    torch.manual_seed(0)
    model = Odd()
    with track(model, logdir=str(tmp_path)) as tracker:
        for _ in range(3):
            out = model(torch.randn(2, 5, requires_grad=True))
            (out["ok"].sum() + out["sparse"].to_dense().sum()).backward()
            tracker.step()
    messages = sorted(str(w.message) for w in recwarn if w.category is UntrackableTensorWarning)
    assert len(messages) == 4, messages
    for name, reason in [("index", "int64"), ("meta", "meta"), ("sparse", "sparse")]:
        assert sum(f"Odd.{name}'" in m and reason in m for m in messages) >= 1
    assert sum("Gradient 'Odd.sparse'" in m for m in messages) == 1
    records = read_records(str(tmp_path))
    assert {(n, t) for n, t, s in records if s == 2} == {
        ("Odd.ok", "Activation"),
        ("Odd.ok", "Gradient"),
    }


def test_every_include_exclude(tmp_path):
    torch.manual_seed(0)
    model = GPT()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    options = {"include": [r"^blocks\.1", "head"], "exclude": r"bias$|mlp\.1"}
    with track(model, logdir=str(tmp_path), optimizer=optimizer, every=3, **options) as tracker:
        for _ in range(7):
            loss = gpt_loss(model, torch.randint(0, 64, (2, 9)))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            tracker.step()
    records = read_records(str(tmp_path))
    assert {step for _, _, step in records} == {0, 3, 6}
    names = {name for name, _, _ in records}
    assert names and all(("blocks.1" in n or "head" in n) for n in names)
    assert not any(n.endswith("bias") or "mlp.1" in n for n in names)
    for tensor_type in ("Activation", "Gradient", "Weight", "Optimiser_State.momentum_buffer"):
        assert any(t == tensor_type for _, t, _ in records)


def test_init_step_and_untracked_steps(tmp_path):
    model = nn.Linear(2, 2)
    with track(model, logdir=str(tmp_path), every=5, init_step=10) as tracker:
        for _ in range(7):
            model(torch.randn(1, 2)).sum().backward()
            assert len(tracker._recorder.buffer) == (0 if tracker.current_step % 5 else 2)
            tracker.step()
    assert {step for _, _, step in read_records(str(tmp_path))} == {10, 15}


def test_switches_only_training_and_formats(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1), nn.Linear(4, 4))
    model[1].eval()
    optimizer = torch.optim.Adam(model.parameters())
    options = {"track_gradients": False, "track_optimizer": False}
    formats = ("float8_e4m3fn", "float16")
    with track(model, logdir=str(tmp_path), optimizer=optimizer, formats=formats, **options) as t:
        x = torch.randn(8, 4) * 3000
        first = nn.functional.linear(x, model[0].weight, model[0].bias).detach()
        model(x).sum().backward()
        optimizer.step()
        t.step()
    records = read_records(str(tmp_path))
    assert {t for _, t, _ in records} == {"Activation", "Weight", "Weight_Gradient"}
    assert ("1", "Activation", 0) not in records  # in eval mode
    stored = records["0", "Activation", 0]
    assert stored.formats == formats
    assert_same(stored.record, expected(first, formats))
    assert stored.record.overflow["float8_e4m3fn"] > 0


def test_losses_are_bitwise_equal_with_and_without_tracking(tmp_path):
    def losses(tracked: bool) -> list[float]:
        torch.manual_seed(0)
        model = GPT(width=16, hidden=32)
        for block in model.blocks:
            block.mlp.insert(2, nn.Dropout(0.1))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        tracker = track(model, logdir=str(tmp_path), optimizer=optimizer, formats=("bfloat16",))
        if not tracked:
            tracker.close()
        out = []
        for _ in range(20):
            loss = gpt_loss(model, torch.randint(0, 64, (2, 9)))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if tracked:
                tracker.step()
            out.append(loss.item())
        tracker.close()
        return out

    assert losses(True) == losses(False)
    assert len(read_records(str(tmp_path))) > 20 * 100  # tracking did happen


def _closure(model: nn.Module, optimizer, x: torch.Tensor, first: dict):
    """A step's closure: zero_grad, forward, backward; keeps its first call's weight
    gradients in ``first`` (LBFGS calls it again from other weights)."""

    def closure():
        optimizer.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        if not first:
            first.update({n: p.grad.numpy().copy() for n, p in model.named_parameters()})
        return loss

    return closure


def _train_with_closure(make_optimizer, keyword: bool, logdir=None):
    """Four steps of ``optimizer.step(closure)``, tracked into ``logdir`` (if any): each
    step's loss, the first closure call's gradients of each step, the trained weights."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    optimizer = make_optimizer(model.parameters())
    tracker = None if logdir is None else track(model, logdir=str(logdir), optimizer=optimizer)
    losses, gradients = [], []
    for step in range(4):
        x = torch.randn(5, 4, generator=torch.Generator().manual_seed(step))
        first: dict[str, np.ndarray] = {}
        closure = _closure(model, optimizer, x, first)
        loss = optimizer.step(closure=closure) if keyword else optimizer.step(closure)
        losses.append(loss.detach().clone())
        gradients.append(first)
        if tracker is not None:
            tracker.step()
    if tracker is not None:
        tracker.close()
    return losses, gradients, [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("keyword", [False, True], ids=["positional", "keyword"])
@pytest.mark.parametrize(
    "make_optimizer",
    [
        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
        lambda ps: torch.optim.Adam(ps, lr=1e-2),
        lambda ps: torch.optim.LBFGS(ps, lr=0.5, max_iter=3),
    ],
    ids=["sgd", "adam", "lbfgs"],
)
def test_a_step_given_a_closure_records_its_own_weight_gradients(tmp_path, make_optimizer, keyword):
    """``optimizer.step(closure)`` runs its pre-hooks before the closure computes the
    gradients: the ``Weight_Gradient`` of step k are those of batch k (of the closure's
    first call), equal to a float64 reference; training is bitwise unchanged."""
    losses, gradients, weights = _train_with_closure(make_optimizer, keyword, tmp_path)
    records = read_records(str(tmp_path))
    for step, first in enumerate(gradients):
        for name, gradient in first.items():
            assert (name, "Weight_Gradient", step) in records, (name, step)
            assert_record_matches(records[name, "Weight_Gradient", step].record, gradient)
    plain_losses, _, plain_weights = _train_with_closure(make_optimizer, keyword)
    assert all(torch.equal(a, b) for a, b in zip(losses, plain_losses))
    assert all(torch.equal(a, b) for a, b in zip(weights, plain_weights))


def test_close_removes_every_hook_also_on_exception(tmp_path):
    model = Shared()
    modules = list(model.modules())
    with pytest.raises(KeyError), track(model, logdir=str(tmp_path)):
        assert all(m._forward_hooks for m in modules)
        model(torch.randn(1, 4)).sum().backward()
        raise KeyError("stop")
    assert not any(m._forward_hooks for m in modules)
    assert read_records(str(tmp_path)) == {}  # the unfinished step is dropped

    tracker = track(model, logdir=str(tmp_path / "b"))
    model(torch.randn(1, 4)).sum().backward()
    tracker.close()
    tracker.close()
    assert not any(m._forward_hooks for m in modules)
    assert ("lin", "Activation", 0) in read_records(str(tmp_path / "b"))  # written at close
    with pytest.raises(RuntimeError, match="closed"):
        tracker.step()


def test_bad_arguments_are_clear_errors(tmp_path):
    model = nn.Linear(1, 1)
    with pytest.raises(TypeError, match="nn.Module"):
        track("model", logdir=str(tmp_path))
    with pytest.raises(ValueError, match="every"):
        track(model, logdir=str(tmp_path), every=0)
    with pytest.raises(ValueError, match="regular expression"):
        track(model, logdir=str(tmp_path), include="(")
    with pytest.raises(ValueError, match="float8_e9"):
        track(model, logdir=str(tmp_path), formats=("float8_e9",))
    with pytest.raises(TypeError, match="Optimizer"):
        track(model, logdir=str(tmp_path), optimizer=[1])
