"""Flax linen: every module method call's output, through ``flax.linen.intercept_methods``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from tandv_tb.jax import attaching
from tandv_tb.jax.collector import Collector


def module_name(module: object, method: str) -> str:
    """``Block_1.Attn`` for ``__call__``; ``Embed_0.attend`` for another method. The root
    module's own output is named by its class (``Transformer``)."""
    try:
        path = ".".join(str(part) for part in module.path)
    except (AttributeError, ValueError):  # an unbound module has no path
        path = ""
    name = path or type(module).__name__
    return name if method == "__call__" else f"{name}.{method}"


def _recorded(method: str) -> bool:
    return method == "__call__" or not (method.startswith("_") or method == "setup")


@contextlib.contextmanager
def intercepting(collector: Collector) -> Iterator[None]:
    """Record the outputs of every linen module method called in this context."""
    try:
        from flax import linen
    except ImportError:  # flax not installed: there are no linen modules to intercept
        yield
        return

    def interceptor(next_fun, args, kwargs, context):
        if not _recorded(context.method_name):
            with attaching.module_scope(module_name(context.module, "__call__")):
                return next_fun(*args, **kwargs)
        name = module_name(context.module, context.method_name)
        module_type = type(context.module).__name__
        call = collector.call_begins(name, module_type, context.module, args, kwargs)
        args, kwargs = collector.module_inputs(name, module_type, args, kwargs)
        with attaching.module_scope(module_name(context.module, "__call__")):
            output = next_fun(*args, **kwargs)
        output = collector.module_output(name, module_type, output)
        collector.call_ends(call, output)
        return output

    with linen.intercept_methods(interceptor):
        yield
