"""Model graphs (``tandv_tb.disk.graph_record``) for the tests and benchmarks: hand-made
ones whose shape is known, and the graph of a real PyTorch model's forward, recorded here
by module hooks (a stand-in until the trackers record graphs themselves)."""

from __future__ import annotations

from tandv_tb.disk.graph_record import ModelGraph, invocation_id

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


def torch_graph(model, *args) -> ModelGraph:
    """The graph of one forward of a PyTorch ``model`` on ``args``, recorded by module
    hooks: a node per module call, named as the torch tracker names modules (the root by
    its class), shapes of the tensors in and out, ``extra_repr`` and parameters; an edge
    where a tensor a call returned is given to a later call."""
    import torch

    from tandv_tb.torch.naming import module_type, named_modules, output_tensors, root_name

    paths = {id(module): path for path, module in named_modules(model)}
    nodes: list[dict] = []
    stack: list[str] = []
    calls: dict[str, int] = {}
    made_by: dict[int, str] = {}  # id of a tensor -> the node that returned it
    alive: list = []  # those tensors, kept so that their ids are not reused
    edges: dict[tuple[str, str], None] = {}

    def specs(value) -> list[dict]:
        return [
            {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")}
            for _, t in output_tensors(value, "")
        ]

    def before(module, args, kwargs):
        path = paths[id(module)] or root_name(model)
        call = calls.get(path, 0)
        calls[path] = call + 1
        node_id = invocation_id(path, call)
        for _, tensor in output_tensors((args, kwargs), ""):
            source = made_by.get(id(tensor))
            if source is not None and source != node_id:
                edges[(source, node_id)] = None
        parameters = [
            {"name": n, "shape": list(p.shape), "dtype": str(p.dtype).removeprefix("torch.")}
            for n, p in module.named_parameters(recurse=False)
        ]
        nodes.append(
            {
                "id": node_id,
                "layer": path,
                "module_type": module_type(module),
                "parent": stack[-1] if stack else None,
                "order": len(nodes),
                "inputs": specs((args, kwargs)),
                "outputs": [],
                "extra": {"extra_repr": module.extra_repr(), "parameters": parameters},
            }
        )
        stack.append(node_id)

    def after(module, args, kwargs, output):
        node_id = stack.pop()
        node = next(n for n in reversed(nodes) if n["id"] == node_id)
        node["outputs"] = specs(output)
        for _, tensor in output_tensors(output, ""):
            made_by[id(tensor)] = node_id
            alive.append(tensor)

    handles = []
    for _, module in named_modules(model):
        handles.append(module.register_forward_pre_hook(before, with_kwargs=True))
        handles.append(module.register_forward_hook(after, with_kwargs=True))
    try:
        with torch.no_grad():
            model(*args)
    finally:
        for handle in handles:
            handle.remove()
    return ModelGraph.from_json({"nodes": nodes, "edges": _edges(edges)})


def llama_graph(layers: int = 48) -> tuple[ModelGraph, list[str]]:
    """The graph of a Hugging Face Llama of ``layers`` decoder layers built from a config
    (about 13 modules a layer), and the names of its modules in call order."""
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
    model = transformers.LlamaForCausalLM(config).eval()
    graph = torch_graph(model, torch.randint(0, 256, (1, 8)))
    return graph, list(dict.fromkeys(node.layer for node in graph.nodes))
