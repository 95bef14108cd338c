"""The graph the PyTorch tracker records of known models, compared node by node and edge by edge."""

from __future__ import annotations

import pytest
import torch

from tandv_tb.torch import track
from tests.helpers.graph_training import ResidualMLP, Twice, train
from tests.helpers.model_graphs import edge_pairs, recorded_graph, small_llama
from tests.helpers.torch_models import GPT, gpt_loss


def nodes(graph) -> list[tuple]:
    return [(n.id, n.module_type, n.parent, n.order) for n in graph.nodes]


def chain(calls: list[tuple[str, str, str | None]]) -> list[tuple]:
    """``(id, module_type, parent)`` in call order, numbered."""
    return [(node_id, kind, parent, order) for order, (node_id, kind, parent) in enumerate(calls)]


def in_record_order(edges: list[tuple[str, str]], calls: list[tuple]) -> list[tuple[str, str]]:
    """``edges`` as a record lists them: by their target's call order, then their source's."""
    order = {call[0]: call[3] for call in calls}
    return sorted(edges, key=lambda edge: (order[edge[1]], order[edge[0]]))


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
