"""The graph the JAX tracker records: Flax linen and NNX models under ``jax.jit`` (edges
through the traced computation), compared node by node and edge by edge; eagerly (edges
by identity); a plain function; written once; a failing recording."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
import pytest
from flax import nnx

from tandv_tb import GraphCaptureWarning
from tandv_tb.jax import track
from tandv_tb.jax.graph_capture import GraphRecording
from tests.helpers.jax_models import GPT, MLP, NnxMLP, gpt_loss, mlp_batch, mlp_loss, tokens
from tests.helpers.model_graphs import edge_pairs, graph_steps, recorded_graph


def nodes(graph) -> list[tuple]:
    return [(n.id, n.module_type, n.parent) for n in graph.nodes]


def train_linen(model, loss, params, batches, logdir=None, jit=True):
    """Adam, tracked when ``logdir`` is given; the losses."""
    optimizer = optax.adam(1e-2)

    def update(params, opt_state, batch):
        value, grads = jax.value_and_grad(lambda p: loss(model, p, batch))(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, grads, value

    update = jax.jit(update) if jit else update
    opt_state = optimizer.init(params)
    losses = []
    tracker = track(params, opt_state, logdir=str(logdir)) if logdir else None
    for batch in batches:
        if tracker is None:
            params, opt_state, _, value = update(params, opt_state, batch)
        else:
            params, opt_state, grads, value = tracker.intercept(update, params, opt_state, batch)
            tracker.step(params, opt_state, grads)
        losses.append(float(value))
    if tracker is not None:
        tracker.close()
    return losses


def mlp_params():
    return MLP().init(jax.random.PRNGKey(0), jnp.zeros((1, 6)))


def test_a_linen_mlp_with_a_module_called_twice_under_jit(tmp_path):
    batches = [mlp_batch(step) for step in range(2)]
    losses = train_linen(MLP(), mlp_loss, mlp_params(), batches, tmp_path)
    assert losses == train_linen(MLP(), mlp_loss, mlp_params(), batches)
    assert graph_steps(tmp_path) == {".": [0]}  # written once
    graph = recorded_graph(tmp_path)
    assert nodes(graph) == [
        ("MLP#0", "MLP", None),
        ("inp#0", "Dense", "MLP#0"),
        ("shared#0", "Dense", "MLP#0"),
        ("shared#1", "Dense", "MLP#0"),
        ("norm#0", "LayerNorm", "MLP#0"),
        ("out#0", "Dense", "MLP#0"),
    ]
    # Across the ReLUs between the calls (the traced computation); the model returns
    # (out, norm's output).
    assert edge_pairs(graph) == [
        ("norm#0", "MLP#0"),
        ("out#0", "MLP#0"),
        ("inp#0", "shared#0"),
        ("shared#0", "shared#1"),
        ("shared#1", "norm#0"),
        ("norm#0", "out#0"),
    ]
    inp = graph.nodes[1]
    assert [(s.shape, s.dtype) for s in inp.inputs] == [((8, 6), "float32")]
    assert [(s.shape, s.dtype) for s in inp.outputs] == [((8, 16), "float32")]
    assert inp.extra == {
        "extra_repr": "features=16, use_bias=True",
        "parameters": [
            {"name": "bias", "shape": [16], "dtype": "float32"},
            {"name": "kernel", "shape": [6, 16], "dtype": "float32"},
        ],
    }
    assert [s.shape for s in graph.nodes[0].outputs] == [(8, 4), (8, 16)]


def test_eagerly_edges_follow_arrays_passed_as_they_are(tmp_path):
    batches = [mlp_batch(0)]
    train_linen(MLP(), mlp_loss, mlp_params(), batches, tmp_path, jit=False)
    graph = recorded_graph(tmp_path)
    assert [n.id for n in graph.nodes] == [
        "MLP#0",
        "inp#0",
        "shared#0",
        "shared#1",
        "norm#0",
        "out#0",
    ]
    # No history of computed arrays: nothing across the ReLUs.
    assert edge_pairs(graph) == [
        ("norm#0", "MLP#0"),
        ("out#0", "MLP#0"),
        ("shared#1", "norm#0"),
        ("norm#0", "out#0"),
    ]


def gpt_expected(depth: int) -> tuple[list[tuple], list[tuple[str, str]]]:
    """The linen GPT's calls and edges: the blocks' residual additions are edges from what
    feeds a block to the second LayerNorm and to the block's output."""
    calls = [("GPT#0", "GPT", None), ("Embed_0#0", "Embed", "GPT#0")]
    edges = [("Embed_0.attend#0", "GPT#0")]
    feed = "Embed_0#0"
    for b in range(depth):
        block = f"Block_{b}"
        attn = f"{block}.MultiHeadDotProductAttention_0"
        calls += [
            (f"{block}#0", "Block", "GPT#0"),
            (f"{block}.LayerNorm_0#0", "LayerNorm", f"{block}#0"),
        ]
        calls += [(f"{attn}#0", "MultiHeadDotProductAttention", f"{block}#0")]
        calls += [
            (f"{attn}.{p}#0", "DenseGeneral", f"{attn}#0") for p in ("query", "key", "value", "out")
        ]
        calls += [(f"{block}.LayerNorm_1#0", "LayerNorm", f"{block}#0")]
        calls += [(f"{block}.Dense_{i}#0", "Dense", f"{block}#0") for i in (0, 1)]
        edges += [
            (feed, f"{block}#0"),
            (f"{attn}.out#0", f"{block}#0"),
            (f"{block}.Dense_1#0", f"{block}#0"),
        ]
        edges += [(feed, f"{block}.LayerNorm_0#0"), (f"{block}.LayerNorm_0#0", f"{attn}#0")]
        edges += [(f"{attn}.out#0", f"{attn}#0")]
        edges += [(f"{block}.LayerNorm_0#0", f"{attn}.{p}#0") for p in ("query", "key", "value")]
        edges += [(f"{attn}.{p}#0", f"{attn}.out#0") for p in ("query", "key", "value")]
        edges += [(feed, f"{block}.LayerNorm_1#0"), (f"{attn}.out#0", f"{block}.LayerNorm_1#0")]
        edges += [(f"{block}.LayerNorm_1#0", f"{block}.Dense_0#0")]
        edges += [(f"{block}.Dense_0#0", f"{block}.Dense_1#0")]
        feed = f"{block}#0"
    calls += [("LayerNorm_0#0", "LayerNorm", "GPT#0"), ("Embed_0.attend#0", "Embed", "GPT#0")]
    edges += [(feed, "LayerNorm_0#0"), ("LayerNorm_0#0", "Embed_0.attend#0")]
    return calls, edges


def test_a_linen_transformer_under_jit(tmp_path):
    model = GPT(depth=2)
    params = model.init(jax.random.PRNGKey(1), tokens(0)[:, :-1])
    train_linen(model, gpt_loss, params, [tokens(0)], tmp_path)
    graph = recorded_graph(tmp_path)
    want_nodes, want_edges = gpt_expected(2)
    assert nodes(graph) == want_nodes
    assert edge_pairs(graph) == want_edges


def test_an_nnx_model_under_nnx_jit(tmp_path):
    model = NnxMLP(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)

    @nnx.jit
    def step(model, optimizer, x, y):
        loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y[:, :3]) ** 2))(model)
        optimizer.update(model, grads)
        return loss, grads

    with track(model_state=model, optimizer_state=optimizer, logdir=str(tmp_path)) as tracker:
        for seed in range(2):
            _, grads = tracker.intercept(step, model, optimizer, *mlp_batch(seed))
            tracker.step(grads=grads)
    graph = recorded_graph(tmp_path)
    assert nodes(graph) == [
        ("NnxMLP#0", "NnxMLP", None),
        ("first#0", "Linear", "NnxMLP#0"),
        ("norm#0", "LayerNorm", "NnxMLP#0"),
        ("last#0", "Linear", "NnxMLP#0"),
    ]
    assert edge_pairs(graph) == [
        ("last#0", "NnxMLP#0"),
        ("first#0", "norm#0"),
        ("norm#0", "last#0"),
    ]
    first = graph.nodes[1]
    assert [s.shape for s in first.inputs] == [(8, 6)]
    assert sorted(p["name"] for p in first.extra["parameters"]) == ["bias", "kernel"]
    assert {p["name"]: p["shape"] for p in first.extra["parameters"]}["kernel"] == [6, 12]


def test_a_plain_function_is_one_node(tmp_path):
    @jax.jit
    def halve(params, x):
        return jax.tree.map(lambda p: p * 0.5, params), jnp.tanh(x @ params["w"])

    params = {"w": jnp.ones((3, 2))}
    with track(params, logdir=str(tmp_path)) as tracker:
        params, _ = tracker.intercept(halve, params, jnp.ones((4, 3)))
        tracker.step(params)
    (node,) = recorded_graph(tmp_path).nodes
    assert (node.id, node.module_type, node.parent) == ("halve#0", "function", None)
    assert [s.shape for s in node.inputs] == [(3, 2), (4, 3)]
    assert [s.shape for s in node.outputs] == [(3, 2), (4, 2)]


def test_a_failing_recording_warns_once_and_training_goes_on(tmp_path, monkeypatch):
    def broken(self, *args):
        raise RuntimeError("injected")

    monkeypatch.setattr(GraphRecording, "begin", broken)
    batches = [mlp_batch(step) for step in range(2)]
    with pytest.warns(GraphCaptureWarning, match="injected") as caught:
        losses = train_linen(MLP(), mlp_loss, mlp_params(), batches, tmp_path)
    assert sum(issubclass(w.category, GraphCaptureWarning) for w in caught) == 1
    assert losses == train_linen(MLP(), mlp_loss, mlp_params(), batches)
    assert graph_steps(tmp_path) == {}
