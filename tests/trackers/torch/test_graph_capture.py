"""The graph the PyTorch tracker records: models whose graph we know, compared node by node
and edge by edge; compiled models (the eager graph, no graph break); when it is written;
odd modules and failures (never a crash, training bitwise unchanged)."""

from __future__ import annotations

import contextlib
import dataclasses
import warnings

import pytest
import torch
from torch import nn
from torch.utils.tensorboard import SummaryWriter

from tandv_tb import GraphCaptureWarning
from tandv_tb.torch import track
from tandv_tb.torch.graph_recording import Recording
from tests.helpers.compiled_training import NanoGPT, assert_same_training, train_nanogpt
from tests.helpers.model_graphs import edge_pairs, graph_steps, recorded_graph, small_llama
from tests.helpers.torch_models import GPT, gpt_loss


def train(model, logdir=None, steps=1, accumulation=1, before_step=None, **tracking):
    """Adam on random data (tracked when ``logdir`` is given); the losses."""
    torch.manual_seed(1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    tracker = track(model, logdir=str(logdir), optimizer=optimizer, **tracking) if logdir else None
    losses = []
    for step in range(steps):
        if before_step is not None:
            before_step(step)
        for _ in range(accumulation):
            loss = model(torch.randn(16, 4)).square().mean()
            loss.backward()
            losses.append(loss.item())
        optimizer.step()
        optimizer.zero_grad()
        if tracker is not None:
            tracker.step()
    if tracker is not None:
        tracker.close()
    return losses


def seeded(make):
    torch.manual_seed(0)
    return make()


def nodes(graph) -> list[tuple]:
    return [(n.id, n.module_type, n.parent, n.order) for n in graph.nodes]


def chain(calls: list[tuple[str, str, str | None]]) -> list[tuple]:
    """``(id, module_type, parent)`` in call order, numbered."""
    return [(node_id, kind, parent, order) for order, (node_id, kind, parent) in enumerate(calls)]


def in_record_order(edges: list[tuple[str, str]], calls: list[tuple]) -> list[tuple[str, str]]:
    """``edges`` as a record lists them: by their target's call order, then their source's."""
    order = {call[0]: call[3] for call in calls}
    return sorted(edges, key=lambda edge: (order[edge[1]], order[edge[0]]))


class ResidualMLP(nn.Module):
    """An input layer, two residual blocks (``h + block(h)``), a functional ReLU, a head."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(2))
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        h = self.inp(x)
        for block in self.blocks:
            h = h + block(h)
        return self.head(torch.relu(h))


def test_a_residual_mlp(tmp_path):
    train(ResidualMLP(), tmp_path)
    graph = recorded_graph(tmp_path)
    root = "ResidualMLP#0"
    assert nodes(graph) == chain(
        [
            (root, "ResidualMLP", None),
            ("inp#0", "Linear", root),
            ("blocks.0#0", "Sequential", root),
            ("blocks.0.0#0", "Linear", "blocks.0#0"),
            ("blocks.0.1#0", "ReLU", "blocks.0#0"),
            ("blocks.1#0", "Sequential", root),
            ("blocks.1.0#0", "Linear", "blocks.1#0"),
            ("blocks.1.1#0", "ReLU", "blocks.1#0"),
            ("head#0", "Linear", root),
        ]
    )
    # Into a call: what its input was computed from, across the residual additions and
    # the functional ReLU. Into an enclosing call: what reaches its output (the
    # Sequential's output is its ReLU's; the ReLU's output is the one consumers see).
    assert edge_pairs(graph) == [
        ("head#0", root),
        ("inp#0", "blocks.0#0"),
        ("blocks.0.1#0", "blocks.0#0"),
        ("inp#0", "blocks.0.0#0"),
        ("blocks.0.0#0", "blocks.0.1#0"),
        ("inp#0", "blocks.1#0"),
        ("blocks.0.1#0", "blocks.1#0"),
        ("blocks.1.1#0", "blocks.1#0"),
        ("inp#0", "blocks.1.0#0"),
        ("blocks.0.1#0", "blocks.1.0#0"),
        ("blocks.1.0#0", "blocks.1.1#0"),
        ("inp#0", "head#0"),
        ("blocks.0.1#0", "head#0"),
        ("blocks.1.1#0", "head#0"),
    ]
    inp = graph.nodes[1]
    assert [(s.shape, s.dtype) for s in inp.inputs] == [((16, 4), "float32")]
    assert [(s.shape, s.dtype) for s in inp.outputs] == [((16, 8), "float32")]
    assert inp.extra == {
        "extra_repr": "in_features=4, out_features=8, bias=True",
        "parameters": [
            {"name": "weight", "shape": [8, 4], "dtype": "float32"},
            {"name": "bias", "shape": [8], "dtype": "float32"},
        ],
    }


def gpt_expected(depth: int = 2) -> tuple[list[tuple], list[tuple[str, str]]]:
    """The reference GPT's calls and edges: each block's residual additions are edges from
    what feeds the block (``embed``, or the block before) to the consumer of the sum
    (``ln2``) and to the block's output, with its ``attn`` and ``mlp``."""
    calls = [("GPT#0", "GPT", None), ("embed#0", "Embedding", "GPT#0")]
    edges = [("head#0", "GPT#0")]
    feed = "embed#0"
    for b in range(depth):
        block = f"blocks.{b}"
        calls += [(f"{block}#0", "DecoderBlock", "GPT#0")]
        calls += [(f"{block}.{p}#0", k, f"{block}#0") for p, k in [("ln1", "LayerNorm")]]
        calls += [(f"{block}.attn#0", "MultiheadAttention", f"{block}#0")]
        calls += [(f"{block}.ln2#0", "LayerNorm", f"{block}#0")]
        calls += [(f"{block}.mlp#0", "Sequential", f"{block}#0")]
        kinds = ("Linear", "GELU", "Linear")
        calls += [(f"{block}.mlp.{i}#0", k, f"{block}.mlp#0") for i, k in enumerate(kinds)]
        edges += [(feed, f"{block}#0"), (f"{block}.attn#0", f"{block}#0")]
        edges += [(f"{block}.mlp.2#0", f"{block}#0"), (feed, f"{block}.ln1#0")]
        edges += [(f"{block}.ln1#0", f"{block}.attn#0")]
        edges += [(feed, f"{block}.ln2#0"), (f"{block}.attn#0", f"{block}.ln2#0")]
        edges += [(f"{block}.ln2#0", f"{block}.mlp#0"), (f"{block}.mlp.2#0", f"{block}.mlp#0")]
        edges += [(f"{block}.ln2#0", f"{block}.mlp.0#0")]
        edges += [
            (f"{block}.mlp.0#0", f"{block}.mlp.1#0"),
            (f"{block}.mlp.1#0", f"{block}.mlp.2#0"),
        ]
        feed = f"{block}#0"
    calls += [("ln#0", "LayerNorm", "GPT#0"), ("head#0", "Linear", "GPT#0")]
    edges += [(feed, "ln#0"), ("ln#0", "head#0")]
    return chain(calls), in_record_order(edges, chain(calls))


def test_the_reference_gpt(tmp_path):
    torch.manual_seed(0)
    model = GPT()
    with track(model, logdir=str(tmp_path)) as tracker:
        gpt_loss(model, torch.randint(0, 64, (2, 9))).backward()
        tracker.step()
    graph = recorded_graph(tmp_path)
    want_nodes, want_edges = gpt_expected()
    assert nodes(graph) == want_nodes
    assert edge_pairs(graph) == want_edges
    attn = next(n for n in graph.nodes if n.id == "blocks.0.attn#0")
    # Given h three times and the causal mask; its output tuple holds None for weights.
    assert [s.shape for s in attn.inputs] == [(2, 8, 32)] * 3 + [(8, 8)]
    assert [(s.shape, s.dtype) for s in attn.inputs[3:]] == [((8, 8), "bool")]
    assert [s.shape for s in attn.outputs] == [(2, 8, 32)]
    assert [s.shape for s in graph.nodes[0].inputs] == [(2, 8)]  # token ids
    assert graph.nodes[0].inputs[0].dtype == "int64"


class Twice(nn.Module):
    """``shared`` called twice, a functional ReLU between."""

    def __init__(self) -> None:
        super().__init__()
        self.shared = nn.Linear(4, 4)
        self.out = nn.Linear(4, 1)

    def forward(self, x):
        return self.out(self.shared(self.shared(x).relu()))


def test_a_module_called_twice_is_two_nodes(tmp_path):
    train(Twice(), tmp_path)
    graph = recorded_graph(tmp_path)
    assert nodes(graph) == chain(
        [
            ("Twice#0", "Twice", None),
            ("shared#0", "Linear", "Twice#0"),
            ("shared#1", "Linear", "Twice#0"),
            ("out#0", "Linear", "Twice#0"),
        ]
    )
    assert edge_pairs(graph) == [
        ("out#0", "Twice#0"),
        ("shared#0", "shared#1"),
        ("shared#1", "out#0"),
    ]
    assert all(n.layer == "shared" for n in graph.nodes[1:3])


def llama_expected(layers: int) -> tuple[list[tuple], list[tuple[str, str]]]:
    """A Hugging Face Llama's calls and edges: attention's projections meet in ``o_proj``
    across the functional attention, and each layer's two residual additions are edges from
    what feeds the layer to ``post_attention_layernorm`` and to the layer's output."""
    top, model = "LlamaForCausalLM#0", "model#0"
    calls = [(top, "LlamaForCausalLM", None), (model, "LlamaModel", top)]
    calls += [("model.embed_tokens#0", "Embedding", model)]
    calls += [("model.rotary_emb#0", "LlamaRotaryEmbedding", model)]
    edges = [("lm_head#0", top), ("model.norm#0", model)]
    edges += [("model.embed_tokens#0", "model.rotary_emb#0")]
    feed = "model.embed_tokens#0"
    for i in range(layers):
        layer = f"model.layers.{i}"
        attn, mlp = f"{layer}.self_attn", f"{layer}.mlp"
        calls += [(f"{layer}#0", "LlamaDecoderLayer", model)]
        calls += [(f"{layer}.input_layernorm#0", "LlamaRMSNorm", f"{layer}#0")]
        calls += [(f"{attn}#0", "LlamaAttention", f"{layer}#0")]
        calls += [(f"{attn}.{p}_proj#0", "Linear", f"{attn}#0") for p in "qkvo"]
        calls += [(f"{layer}.post_attention_layernorm#0", "LlamaRMSNorm", f"{layer}#0")]
        calls += [(f"{mlp}#0", "LlamaMLP", f"{layer}#0")]
        calls += [(f"{mlp}.gate_proj#0", "Linear", f"{mlp}#0")]
        calls += [(f"{mlp}.act_fn#0", "SiLUActivation", f"{mlp}#0")]
        calls += [(f"{mlp}.{p}_proj#0", "Linear", f"{mlp}#0") for p in ("up", "down")]
        edges += [(feed, f"{layer}#0"), ("model.rotary_emb#0", f"{layer}#0")]
        edges += [(f"{attn}.o_proj#0", f"{layer}#0"), (f"{mlp}.down_proj#0", f"{layer}#0")]
        edges += [(feed, f"{layer}.input_layernorm#0")]
        edges += [("model.rotary_emb#0", f"{attn}#0"), (f"{layer}.input_layernorm#0", f"{attn}#0")]
        edges += [(f"{attn}.o_proj#0", f"{attn}#0")]
        edges += [(f"{layer}.input_layernorm#0", f"{attn}.{p}_proj#0") for p in "qkv"]
        edges += [(f"{attn}.{p}_proj#0", f"{attn}.o_proj#0") for p in "qkv"]
        post = f"{layer}.post_attention_layernorm#0"
        edges += [(feed, post), (f"{attn}.o_proj#0", post)]
        edges += [(post, f"{mlp}#0"), (f"{mlp}.down_proj#0", f"{mlp}#0")]
        edges += [(post, f"{mlp}.gate_proj#0"), (f"{mlp}.gate_proj#0", f"{mlp}.act_fn#0")]
        edges += [(post, f"{mlp}.up_proj#0")]
        edges += [
            (f"{mlp}.act_fn#0", f"{mlp}.down_proj#0"),
            (f"{mlp}.up_proj#0", f"{mlp}.down_proj#0"),
        ]
        feed = f"{layer}#0"
    calls += [("model.norm#0", "LlamaRMSNorm", model), ("lm_head#0", "Linear", top)]
    edges += [(feed, "model.norm#0"), ("model.norm#0", "lm_head#0")]
    return chain(calls), in_record_order(edges, chain(calls))


def test_a_hugging_face_llama_built_from_a_config(tmp_path):
    pytest.importorskip("transformers")
    model = small_llama(2)
    with track(model, logdir=str(tmp_path)) as tracker:
        ids = torch.randint(0, 256, (2, 8))
        model(input_ids=ids, labels=ids).loss.backward()
        tracker.step()
    graph = recorded_graph(tmp_path)
    want_nodes, want_edges = llama_expected(2)
    assert nodes(graph) == want_nodes
    assert edge_pairs(graph) == want_edges
    assert [s.shape for s in graph.nodes[0].outputs] == [(), (2, 8, 256)]  # loss, logits


def test_a_compiled_model_records_the_eager_graph_without_a_graph_break(tmp_path):
    """``torch.compile(model)`` given to ``track`` and ``model.compile()``: the eager
    model's graph, no graph break, training bitwise as untracked (aot_eager: dynamo and
    AOTAutograd as inductor runs them, without inductor's slow compile)."""
    torch.manual_seed(0)
    train_nanogpt(NanoGPT(), 1, logdir=str(tmp_path / "eager"))
    eager = recorded_graph(tmp_path / "eager")
    assert len(eager.nodes) == 25 and len(eager.edges) == 36

    def compiled(how: str) -> nn.Module:
        torch.compiler.reset()
        torch.manual_seed(0)
        if how == "wrapped":
            return torch.compile(NanoGPT(), backend="aot_eager")
        model = NanoGPT()
        model.compile(backend="aot_eager")
        return model

    for how in ("wrapped", "method"):
        plain = train_nanogpt(compiled(how), 2)
        tracked = train_nanogpt(compiled(how), 2, logdir=str(tmp_path / how))
        assert_same_training(tracked, plain)
        assert tracked.breaks == 0
        assert recorded_graph(tmp_path / how) == eager, how


def test_a_compiled_wrapper_track_was_not_given_says_its_graph_is_not_recorded(tmp_path):
    torch.compiler.reset()
    model = NanoGPT()
    compiled = torch.compile(model, backend="aot_eager")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    tokens = torch.randint(0, 64, (2, 9))
    with (
        pytest.warns(GraphCaptureWarning, match="give track\\(\\) the compiled module"),
        track(model, logdir=str(tmp_path), optimizer=optimizer) as tracker,
    ):
        _, loss = compiled(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        optimizer.step()
        tracker.step()
    assert graph_steps(tmp_path) == {}


class Parts(nn.Module):
    """A model whose parts the training step calls itself, as a Lightning
    ``training_step`` calls ``self.net``."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 8)
        self.body = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
        self.head = nn.Linear(8, 2)


def test_a_compiled_part_the_step_calls_itself_records_the_eager_graph(tmp_path):
    """``model.body = torch.compile(model.body)`` called by the step between eager parts:
    its calls are replayed into the graph after it, and feed the part after it, as eager;
    training is bitwise as untracked."""

    def run(compiled: bool, logdir=None) -> list[torch.Tensor]:
        torch.compiler.reset()
        torch.manual_seed(0)
        model = Parts()
        if compiled:
            model.body = torch.compile(model.body, backend="aot_eager")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(3, 4)
        losses = []
        tracking = track(model, logdir=str(logdir), optimizer=optimizer) if logdir else None
        with tracking or contextlib.nullcontext():
            for _ in range(2):
                loss = model.head(model.body(model.embed(x))).square().mean()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                losses.append(loss.detach())
                if tracking is not None:
                    tracking.step()
        return losses

    run(False, tmp_path / "eager")
    eager = recorded_graph(tmp_path / "eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error", GraphCaptureWarning)
        tracked = run(True, tmp_path / "compiled")
    assert recorded_graph(tmp_path / "compiled") == eager
    assert [n.id for n in eager.nodes] == ["embed#0", "body#0", "body.0#0", "body.1#0", "head#0"]
    assert {("embed#0", "body#0"), ("body.1#0", "head#0")} <= set(edge_pairs(eager))
    assert all(torch.equal(a, b) for a, b in zip(tracked, run(True), strict=True))


def test_written_once_and_again_when_the_calls_change(tmp_path):
    """Step 3 calls one more module: the next tracked step records the graph again. A
    smaller batch (sizes alone) records nothing again."""

    class Growing(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b, self.extra = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)
            self.use_extra = False

        def forward(self, x):
            h = self.a(x)
            if self.use_extra:
                h = self.extra(h)
            return self.b(h)

    model = Growing()

    def before(step):
        model.use_extra = step >= 3

    train(model, tmp_path, steps=6, before_step=before)
    assert graph_steps(tmp_path) == {".": [0, 4]}
    assert [n.id for n in recorded_graph(tmp_path).nodes] == ["Growing#0", "a#0", "extra#0", "b#0"]

    torch.manual_seed(0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with track(model, logdir=str(tmp_path / "sizes"), optimizer=optimizer) as tracker:
        for batch in (16, 16, 5):
            model(torch.randn(batch, 4)).sum().backward()
            optimizer.step()
            tracker.step()
    assert graph_steps(tmp_path / "sizes") == {".": [0]}


def test_gradient_accumulation_records_one_forward(tmp_path):
    losses = train(seeded(Twice), tmp_path, steps=2, accumulation=3)
    assert losses == train(seeded(Twice), steps=2, accumulation=3)
    assert [n.id for n in recorded_graph(tmp_path).nodes] == [
        "Twice#0",
        "shared#0",
        "shared#1",
        "out#0",
    ]


# A first step with no module recorded looks to the tracker like compiled code built before
# track(): it says so and resets dynamo (harmless here).
@pytest.mark.filterwarnings("ignore::tandv_tb.torch.CompiledBeforeTrackWarning")
def test_eval_calls_are_left_out_with_only_training(tmp_path):
    model = Twice()

    def before(step):
        model.train(step >= 2)

    train(model, tmp_path, steps=3, before_step=before)
    assert graph_steps(tmp_path) == {".": [2]}


def test_a_users_summary_writer_gets_the_graph(tmp_path):
    writer = SummaryWriter(str(tmp_path))
    model = ResidualMLP()
    with track(model, writer=writer) as tracker:
        model(torch.randn(2, 4)).sum().backward()
        tracker.step()
    writer.close()
    assert len(recorded_graph(tmp_path).nodes) == 9


@dataclasses.dataclass
class Pair:
    left: torch.Tensor
    right: torch.Tensor


class Split(nn.Module):
    def forward(self, x):
        return Pair(x[:, :2] * 2, x[:, 2:] + 1)


class Keep(nn.Module):
    def forward(self, x):
        return x


class Nothing(nn.Module):
    def forward(self, x):
        self.seen = x.shape
        return None


class Mixed(nn.Module):
    def forward(self, x):
        return {"a": torch.cat([x, x], dim=1), "n": 3, "none": None}

    def extra_repr(self):
        raise RuntimeError("a broken extra_repr")


class Odd(nn.Module):
    """Dataclass, dict, ``None`` and unchanged outputs; an in-place addition to a module's
    output; an in-place ReLU module."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 4)
        self.split, self.keep, self.nothing, self.mixed = Split(), Keep(), Nothing(), Mixed()
        self.lin = nn.Linear(4, 4)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        pair = self.split(self.first(x))
        y = self.keep(pair.left)
        self.nothing(y)
        z = self.lin(self.mixed(y)["a"])
        z += torch.cat([pair.right, pair.right], dim=1)
        return self.relu(z)


def test_odd_outputs_in_place_changes_and_other_hooks(tmp_path):
    """Never a crash, training bitwise unchanged; what can be recorded is."""

    def odd() -> Odd:
        torch.manual_seed(0)
        model = Odd()
        # Another library's hooks: one replaces an output, one changes an input.
        model.keep.register_forward_hook(lambda m, a, out: out * 1.0)
        model.lin.register_forward_pre_hook(lambda m, a: (a[0] + 0.0,))
        return model

    with warnings.catch_warnings():
        warnings.simplefilter("error", GraphCaptureWarning)
        assert train(odd(), tmp_path, steps=2) == train(odd(), steps=2)
    graph = recorded_graph(tmp_path)
    specs = {n.id: ([s.shape for s in n.inputs], [s.shape for s in n.outputs]) for n in graph.nodes}
    assert specs == {
        "Odd#0": ([(16, 4)], [(16, 4)]),
        "first#0": ([(16, 4)], [(16, 4)]),
        "split#0": ([(16, 4)], [(16, 2), (16, 2)]),
        "keep#0": ([(16, 2)], [(16, 2)]),
        "nothing#0": ([(16, 2)], []),
        "mixed#0": ([(16, 2)], [(16, 4)]),
        "lin#0": ([(16, 4)], [(16, 4)]),
        "relu#0": ([(16, 4)], [(16, 4)]),
    }
    assert graph.nodes[5].extra["extra_repr"] == ""
    assert edge_pairs(graph) == [
        ("relu#0", "Odd#0"),
        ("first#0", "split#0"),
        ("split#0", "keep#0"),
        ("keep#0", "nothing#0"),
        ("keep#0", "mixed#0"),
        ("mixed#0", "lin#0"),
        ("split#0", "relu#0"),  # the in-place addition to lin's output
        ("lin#0", "relu#0"),
    ]


def test_without_autograd_edges_follow_tensors_and_views_of_them(tmp_path):
    """Under ``torch.no_grad`` a tensor a call returned is followed as it is passed on, or
    viewed; not through functional code (the residual addition)."""
    model = ResidualMLP()
    with track(model, logdir=str(tmp_path)) as tracker, torch.no_grad():
        h = model.inp(torch.randn(2, 4))
        model.head(h.view(2, 8)[:, :8])
        model(torch.randn(2, 4))
        tracker.step()
    graph = recorded_graph(tmp_path)
    assert [n.id for n in graph.nodes[:2]] == ["inp#0", "head#0"]
    assert graph.nodes[2].id == "ResidualMLP#0" and graph.nodes[2].parent is None
    assert ("inp#0", "head#0") in edge_pairs(graph)  # through a view of a view
    assert ("inp#1", "blocks.0.0#0") in edge_pairs(graph)
    assert ("inp#1", "blocks.1#0") not in edge_pairs(graph)  # after h + block(h)


def test_a_model_of_one_module_is_one_node(tmp_path):
    train(nn.Linear(4, 2), tmp_path)
    graph = recorded_graph(tmp_path)
    assert [(n.id, n.parent) for n in graph.nodes] == [("Linear#0", None)]
    assert graph.edges == ()


def test_a_model_without_submodules_is_one_node(tmp_path):
    class Functional(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(4, 2))

        def forward(self, x):
            return torch.tanh(x @ self.w)

    train(Functional(), tmp_path)
    (node,) = recorded_graph(tmp_path).nodes
    assert node.id == "Functional#0"
    assert node.extra["parameters"] == [{"name": "w", "shape": [4, 2], "dtype": "float32"}]


def test_a_failing_capture_warns_once_and_training_goes_on(tmp_path, monkeypatch):
    def broken(self, module, args, kwargs, take=True):
        raise RuntimeError("injected")

    monkeypatch.setattr(Recording, "begin", broken)
    with pytest.warns(GraphCaptureWarning, match="injected") as caught:
        losses = train(seeded(ResidualMLP), tmp_path, steps=3)
    assert sum(issubclass(w.category, GraphCaptureWarning) for w in caught) == 1
    assert losses == train(seeded(ResidualMLP), steps=3)
    assert graph_steps(tmp_path) == {}
