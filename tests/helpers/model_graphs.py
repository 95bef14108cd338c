"""Model graphs (``tandv_tb.event_files.graph_record``) for the tests and benchmarks: hand-made
ones whose shape is known (large or hostile ones for the route and the view), the graph
the PyTorch tracker records of a Hugging Face Llama, and readers of the recorded graphs."""

from __future__ import annotations

from tandv_tb.event_files.graph_record import ModelGraph, invocation_id

HOSTILE = "<img src=x onerror=alert(1)>"


def _node(layer, kind, parent, order, call=0, shape=(4, 8), extra=None) -> dict:
    return {
        "id": invocation_id(layer, call),
        "layer": layer,
        "module_type": kind,
        "parent": parent,
        "order": order,
        "inputs": [{"shape": list(shape), "dtype": "float32"}],
        "outputs": [{"shape": list(shape), "dtype": "bfloat16"}],
        "extra": extra or {},
    }


def _edges(pairs) -> list[dict]:
    return [{"source": source, "target": target} for source, target in pairs]


def residual_graph() -> dict:
    """A model ``Net`` calling ``embed``, ``block`` twice (shared weights) and a module with
    a hostile name; the block's ``fc`` inside it; the residual path skips each block call."""
    fc = {"extra_repr": "in_features=8, out_features=8, bias=True"}
    fc["parameters"] = [{"name": "weight", "shape": [8, 8], "dtype": "float32"}]
    nodes = [
        _node("Net", "Net", None, 0),
        _node("embed", "Embedding", "Net#0", 1),
        _node("block", "Block", "Net#0", 2),
        _node("block.fc", "Linear", "block#0", 3, extra=fc),
        _node("block", "Block", "Net#0", 4, call=1),
        _node("block.fc", "Linear", "block#1", 5, call=1, extra=fc),
        _node(HOSTILE, "名前\"'\\", "Net#0", 6, shape=()),
    ]
    edges = [
        ("embed#0", "block#0"),
        ("embed#0", "block.fc#0"),
        ("block.fc#0", "block#1"),
        ("embed#0", "block#1"),  # the residual path around the first call
        ("block#1", f"{HOSTILE}#0"),
    ]
    return {"nodes": nodes, "edges": _edges(edges)}


#: The modules of ``gpt_graph`` inside each block, in call order.
BLOCK_PARTS = ("ln_1", "attn", "ln_2", "mlp")


def gpt_graph(blocks: int = 2, root: str = "GPT") -> dict:
    """A GPT-like model: ``embed``, ``blocks.<i>`` (``ln_1``, ``attn`` holding ``c_attn``
    and ``c_proj``, ``ln_2``, ``mlp`` holding ``c_fc`` and ``c_proj``), ``head``. Each block
    adds its ``attn`` and ``mlp`` to the residual stream: the stream's edges skip them."""
    shape = (2, 16, 32)
    nodes = [_node(root, root, None, 0, shape=shape), _node("embed", "Embedding", f"{root}#0", 1)]
    edges = []
    stream = "embed#0"  # what feeds the residual stream
    for b in range(blocks):
        block = f"blocks.{b}"
        nodes.append(_node(block, "Block", f"{root}#0", len(nodes), shape=shape))
        edges.append((stream, f"{block}#0"))
        for part in BLOCK_PARTS:
            layer = f"{block}.{part}"
            kind = "LayerNorm" if part.startswith("ln") else part.upper()
            extra = {"extra_repr": "(32,), eps=1e-05"} if kind == "LayerNorm" else {}
            nodes.append(_node(layer, kind, f"{block}#0", len(nodes), shape=shape, extra=extra))
            if kind == "LayerNorm":
                edges.append((stream, f"{layer}#0"))
                normed = f"{layer}#0"
                continue
            inner = ("c_attn", "c_proj") if part == "attn" else ("c_fc", "c_proj")
            previous = normed
            for name in inner:
                child = f"{layer}.{name}"
                nodes.append(_node(child, "Linear", f"{layer}#0", len(nodes), shape=shape))
                edges.append((previous, f"{child}#0"))
                previous = f"{child}#0"
            edges.append((previous, f"{block}#0"))  # the sum leaves the block
            stream = f"{layer}#0"
    nodes.append(_node("head", "Linear", f"{root}#0", len(nodes), shape=shape))
    edges.append((stream, "head#0"))
    return {"nodes": nodes, "edges": _edges(edges)}


def gpt_layers(blocks: int = 2, root: str = "GPT") -> list[str]:
    """The layer names of ``gpt_graph``, in call order."""
    return [node["layer"] for node in gpt_graph(blocks, root)["nodes"]]


def graph_steps(logdir) -> dict[str, list[int]]:
    """The steps of every graph record under ``logdir``, by run (in the order written)."""
    from tandv_tb.event_files.event_reader import read_file, select_runs
    from tandv_tb.event_files.tag_table import TagTable

    found: dict[str, list[int]] = {}
    for run, sources in select_runs(str(logdir)).items():
        table = TagTable()
        for source in sources:
            for chunk in read_file(source, table):
                found.setdefault(run, []).extend(record.step for record in chunk.graphs)
    return {run: steps for run, steps in found.items() if steps}


def recorded_graph(logdir) -> ModelGraph:
    """The graph of the one run under ``logdir`` that recorded one."""
    from tandv_tb.event_files.graphs import read_graph

    (graph,) = read_graph(str(logdir)).values()
    return graph


def edge_pairs(graph: ModelGraph) -> list[tuple[str, str]]:
    return [(edge.source, edge.target) for edge in graph.edges]


def small_llama(layers: int):
    """A Hugging Face ``LlamaForCausalLM`` of ``layers`` decoder layers built from a config,
    its weights from seed 0: hidden size 64, two heads, a vocabulary of 256 (small enough to
    train on the CPU, with the module tree of the real model)."""
    import torch
    import transformers

    config = transformers.LlamaConfig(
        num_hidden_layers=layers,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=2,
        num_key_value_heads=2,
        vocab_size=256,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


def llama_graph(layers: int = 48) -> tuple[ModelGraph, list[str]]:
    """The graph of a Hugging Face Llama of ``layers`` decoder layers built from a config
    (about 13 modules a layer), as the PyTorch tracker records it over one training
    forward, and the names of its modules in call order."""
    import tempfile

    import torch

    from tandv_tb.torch import track

    model = small_llama(layers)
    off = dict.fromkeys(("track_activations", "track_gradients", "track_weights"), False)
    with tempfile.TemporaryDirectory() as logdir:
        with track(model, logdir=logdir, watch_nonfinite=False, **off) as tracker:
            model(torch.randint(0, 256, (1, 8)))
            tracker.step()
        graph = recorded_graph(logdir)
    return graph, list(dict.fromkeys(node.layer for node in graph.nodes))
