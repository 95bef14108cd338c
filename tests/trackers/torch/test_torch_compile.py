"""``track`` under ``torch.compile``: graphs whole, training bitwise unchanged, the eager tags."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch._dynamo.utils import counters
from torch.utils.checkpoint import checkpoint

from tandv_tb import versions
from tandv_tb.torch import CompiledBeforeTrackWarning, compiled, features, track
from tests.helpers.compiled_training import (
    INSIDE,
    NanoGPT,
    Trained,
    assert_same_training,
    nanogpt_optimizer,
    one_thread,
    steps,
    tags,
    train_nanogpt,
)
from tests.helpers.torch_models import ADAM_TYPES, assert_same, expected, read_records

# Inductor on the CPU: the compiled graph stays whole (no graph break, no recompile after the
# first tracked and untracked step), training is bitwise unchanged, and the records carry the
# eager model's tags, whatever the order of ``track`` and ``compile``. Compiled code is shared
# by every instance of a module class whose guards match (dynamo does not guard on module
# hooks), so each training starts from ``torch.compiler.reset()``; the trainings are run once
# per module and shared between the tests. attach, the nonfinite watch and buffers inductor
# rewrites in place: test_torch_compile_watch.py.

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

STEPS = 12


def compiled_nanogpt(**compile_options) -> nn.Module:
    torch.compiler.reset()
    torch.manual_seed(0)
    return torch.compile(NanoGPT(), **compile_options)


@pytest.fixture(scope="module")
def nanogpt(tmp_path_factory) -> dict:
    """nanoGPT trained compiled: untracked, tracked every step, ``every=10`` with the watch
    and without; and tracked eagerly (for the tags)."""
    root = tmp_path_factory.mktemp("nanogpt")
    runs = {"eager": root / "eager"}
    torch.manual_seed(0)
    train_nanogpt(NanoGPT(), 2, logdir=str(runs["eager"]))
    variants = {
        "plain": {},
        "every1": {"every": 1},
        "every10": {"every": 10},
        "every10_no_watch": {"every": 10, "watch_nonfinite": False},
    }
    trained = {}
    with one_thread(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name, options in variants.items():
            if options:
                runs[name] = root / name
                options = {**options, "logdir": str(runs[name])}
            trained[name] = train_nanogpt(compiled_nanogpt(), STEPS, **options)
    return {"runs": runs, "trained": trained, "warnings": caught}


@pytest.mark.parametrize("variant", ["every1", "every10", "every10_no_watch"])
def test_nanogpt_trains_bitwise_unchanged_with_one_graph_per_variant(nanogpt, variant):
    """Losses and weights equal the untracked compiled model's bit for bit; no graph
    break; after the first tracked and the first untracked step nothing recompiles."""
    trained = nanogpt["trained"][variant]
    assert_same_training(trained, nanogpt["trained"]["plain"])
    assert trained.breaks == 0
    assert len(set(trained.graphs[1:])) == 1, trained.graphs
    # With the watch, tracked and untracked steps run one graph: the first step compiles
    # it all (the forward, the root module's hook, as plain compiles the forward alone).
    plain = nanogpt["trained"]["plain"].graphs
    made = trained.graphs[-1] - trained.graphs[0] + (trained.graphs[0] - plain[-1])
    assert made > 0


def test_nanogpt_records_every_tensor_type_at_its_steps_with_the_eager_tags(nanogpt):
    """All but the gradient of the model's logits, which nanoGPT turns into its loss
    inside its forward: it stays inside the compiled graph, and a warning says so."""
    runs = nanogpt["runs"]
    assert steps(runs["every1"]) == list(range(STEPS))
    assert steps(runs["every10"]) == steps(runs["every10_no_watch"]) == [0, 10]
    eager = tags(runs["eager"])
    assert {t for _, t in eager} == ADAM_TYPES  # Weight_Gradient although zero_grad came first
    for variant in ("every1", "every10", "every10_no_watch"):
        assert tags(runs[variant]) == eager - INSIDE, variant
    warned = [str(w.message) for w in nanogpt["warnings"]]
    assert any("Gradient 'NanoGPT'" in w and "torch.compile" in w for w in warned), warned


def test_the_compiled_records_hold_the_compiled_tensors(tmp_path):
    """What is recorded is the tensor the compiled graph computed: with ``aot_eager`` the
    graph computes as eagerly, and the records equal the eager ones (but for the logits'
    gradient, which stays inside the graph)."""
    records = {}
    for mode in ("eager", "compiled"):
        torch.compiler.reset()
        torch.manual_seed(0)
        model = NanoGPT()
        if mode == "compiled":
            model = torch.compile(model, backend="aot_eager")
        train_nanogpt(model, 2, logdir=str(tmp_path / mode), formats=("float8_e4m3fn",))
        records[mode] = read_records(str(tmp_path / mode))
    inside = {key for key in records["eager"] if key[:2] == ("NanoGPT", "Gradient")}
    assert records["compiled"].keys() == records["eager"].keys() - inside
    for key, stored in records["compiled"].items():
        assert_same(stored.record, records["eager"][key].record, rtol=1e-5)
        assert stored.order == records["eager"][key].order, key


# -- Hugging Face Llama ---------------------------------------------------------------------


def llama() -> nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
    )
    return transformers.LlamaForCausalLM(config)  # use_cache: a DynamicCache every step


def train_llama(model: nn.Module, steps_: int, **tracking) -> Trained:
    generator = torch.Generator().manual_seed(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tracker = track(model, optimizer=optimizer, **tracking) if tracking else None
    losses, graphs = [], []
    breaks = sum(counters["graph_break"].values())
    for _ in range(steps_):
        ids = torch.randint(0, 128, (2, 16), generator=generator)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if tracker is not None:
            tracker.step()
        losses.append(loss.item())
        graphs.append(counters["stats"]["unique_graphs"])
    if tracker is not None:
        tracker.close()
    weights = {name: p.detach().clone() for name, p in model.named_parameters()}
    return Trained(losses, weights, graphs, sum(counters["graph_break"].values()) - breaks)


def test_llama_compiled_trains_bitwise_unchanged_and_records_the_eager_tags(tmp_path):
    train_llama(llama(), 1, logdir=str(tmp_path / "eager"))
    with one_thread():
        torch.compiler.reset()
        plain = train_llama(torch.compile(llama()), 6)
        torch.compiler.reset()
        tracked = train_llama(torch.compile(llama()), 6, logdir=str(tmp_path / "t"), every=3)
    assert_same_training(tracked, plain)
    assert plain.breaks == tracked.breaks == 0
    assert len(set(tracked.graphs)) == 1, tracked.graphs  # all made at the first step
    assert tags(tmp_path / "t") == tags(tmp_path / "eager") - {
        ("LlamaForCausalLM.logits", "Gradient")
    }
    assert steps(tmp_path / "t") == [0, 3]


# -- the order of track and compile --------------------------------------------------------


def test_a_model_compiled_and_run_before_track_records_the_eager_tags(nanogpt, tmp_path):
    """``torch.compile(model)`` and ``model.compile()``, run before ``track``: ``track``
    drops their compiled code (it would not see the hooks)."""
    eager = tags(nanogpt["runs"]["eager"]) - INSIDE
    compiled = compiled_nanogpt()
    train_nanogpt(compiled, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompiledBeforeTrackWarning)
        train_nanogpt(compiled, 2, logdir=str(tmp_path / "wrapper"))
        torch.compiler.reset()
        torch.manual_seed(0)
        model = NanoGPT()
        model.compile()
        train_nanogpt(model, 1)
        train_nanogpt(model, 2, logdir=str(tmp_path / "method"))
    assert tags(tmp_path / "wrapper") == tags(tmp_path / "method") == eager
    assert steps(tmp_path / "method") == [0, 1]


def test_compile_after_track_records_the_eager_tags(nanogpt, tmp_path):
    torch.compiler.reset()
    torch.manual_seed(0)
    model = NanoGPT()
    optimizer = nanogpt_optimizer(model)
    generator = torch.Generator().manual_seed(0)
    breaks = sum(counters["graph_break"].values())
    with track(model, logdir=str(tmp_path), optimizer=optimizer) as tracker:
        model.compile()
        for _ in range(2):
            tokens = torch.randint(0, 64, (4, 17), generator=generator)
            model(tokens[:, :-1], tokens[:, 1:])[1].backward()
            optimizer.step()
            optimizer.zero_grad()
            tracker.step()
    assert sum(counters["graph_break"].values()) == breaks
    assert tags(tmp_path) == tags(nanogpt["runs"]["eager"]) - INSIDE


def test_a_compiled_wrapper_run_before_tracking_its_inner_model_is_said_and_mended(
    nanogpt, tmp_path
):
    """The wrapper's compiled code cannot be seen from the model it wraps: the first
    tracked step records no module, says so once, and the next steps record everything."""
    torch.compiler.reset()
    torch.manual_seed(0)
    model = NanoGPT()
    compiled = torch.compile(model)
    train_nanogpt(compiled, 1)
    optimizer = nanogpt_optimizer(model)
    generator = torch.Generator().manual_seed(0)
    said = pytest.warns(CompiledBeforeTrackWarning, match="step 0 recorded no activations")
    with said, track(model, logdir=str(tmp_path), optimizer=optimizer) as tracker:
        for _ in range(3):
            tokens = torch.randint(0, 64, (4, 17), generator=generator)
            compiled(tokens[:, :-1], tokens[:, 1:])[1].backward()
            optimizer.step()
            optimizer.zero_grad()
            tracker.step()
    records = read_records(str(tmp_path))
    eager = tags(nanogpt["runs"]["eager"]) - INSIDE
    assert {(n, t) for n, t, s in records if s == 2} == eager
    assert ("h.0.attn", "Activation", 0) not in records


def test_fullgraph_compiles_the_tracked_model_in_one_graph(nanogpt, tmp_path):
    train_nanogpt(compiled_nanogpt(fullgraph=True), 2, logdir=str(tmp_path), track_inputs=True)
    got = tags(tmp_path)
    assert tags(nanogpt["runs"]["eager"]) - INSIDE <= got
    assert {t for _, t in got} == ADAM_TYPES | {"Input", "Input_Gradient"}


def test_close_leaves_the_compiled_model_as_if_never_tracked(nanogpt, tmp_path):
    """After ``close`` the model trains on bit for bit as the untracked one, and a new
    tracker records everything from its first step."""
    with one_thread():
        compiled = compiled_nanogpt()
        first = train_nanogpt(compiled, 2, logdir=str(tmp_path / "first"), every=1)
        after = train_nanogpt(compiled, 2, seed=1)
        with warnings.catch_warnings():
            warnings.simplefilter("error", CompiledBeforeTrackWarning)
            train_nanogpt(compiled, 1, logdir=str(tmp_path / "second"), seed=2)
        plain = compiled_nanogpt()
        want_first = train_nanogpt(plain, 2)
        want_after = train_nanogpt(plain, 2, seed=1)
    assert_same_training(first, want_first)
    assert_same_training(after, want_after)
    assert tags(tmp_path / "second") == tags(nanogpt["runs"]["eager"]) - INSIDE


# -- weight gradients at the optimizer's step ---------------------------------------------


def test_weight_gradients_are_the_unscaled_ones_the_optimizer_used(tmp_path):
    """``zero_grad`` before ``tracker.step()``, and ``GradScaler``: the recorded gradient is
    the one the optimizer stepped with (unscaled), read when it stepped."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    used: list[dict[str, torch.Tensor]] = []
    with track(model, logdir=str(tmp_path), optimizer=optimizer) as tracker:
        optimizer.register_step_pre_hook(
            lambda *_: used.append({n: p.grad.clone() for n, p in model.named_parameters()})
        )
        for _ in range(2):
            scaler.scale(model(torch.randn(5, 4)).square().mean()).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            tracker.step()
    records = read_records(str(tmp_path))
    for step, grads in enumerate(used):
        for name, grad in grads.items():
            assert grad.abs().max() < 100  # unscaled
            assert_same(records[name, "Weight_Gradient", step].record, expected(grad))


class Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8))
        self.c = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(checkpoint(self.b, self.a(x), use_reentrant=False))


def test_a_checkpointed_block_compiled_records_once_as_eagerly(tmp_path):
    """The recomputation of a checkpointed block runs inside the compiled backward: its
    activations are not taken a second time."""
    records = {}
    for mode in ("eager", "compiled"):
        torch.compiler.reset()
        torch.manual_seed(0)
        model = Checkpointed()
        run = torch.compile(model, backend="aot_eager") if mode == "compiled" else model
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        with track(run, logdir=str(tmp_path / mode), optimizer=optimizer) as tracker:
            for step in range(2):
                x = torch.randn(4, 8, generator=torch.Generator().manual_seed(step))
                run(x).square().mean().backward()
                optimizer.step()
                optimizer.zero_grad()
                tracker.step()
        records[mode] = read_records(str(tmp_path / mode))
    assert records["compiled"].keys() == records["eager"].keys()
    for key, stored in records["eager"].items():
        assert_same(records["compiled"][key].record, stored.record, rtol=1e-5)


def test_before_torch_2_12_compiled_code_hands_nothing_over_and_training_goes_on(
    monkeypatch, tmp_path
):
    """torch before 2.12 (``HOOKS_IN_GRAPH`` false: 2.11's dynamo stops on the hooks): the
    hooks do nothing while dynamo traces, training is unchanged with no graph break, the
    weights, gradients and optimizer state are recorded, and ``track`` says what is not."""
    monkeypatch.setattr(compiled, "HOOKS_IN_GRAPH", False)
    monkeypatch.setattr(versions, "_said", set())  # said once per process: anew here
    with one_thread():
        needs = f"needs torch {features.COMPILED_TRACKING}"
        with pytest.warns(versions.NewerReleaseWarning, match=needs):
            got = train_nanogpt(compiled_nanogpt(), 3, logdir=str(tmp_path), every=1)
        want = train_nanogpt(compiled_nanogpt(), 3)
    assert_same_training(got, want)
    assert got.breaks == 0
    recorded = tags(tmp_path)
    assert {t for _, t in recorded} >= ADAM_TYPES - {"Activation", "Gradient"}
    assert not {name for name, t in recorded if t in ("Activation", "Gradient") and "." in name}
