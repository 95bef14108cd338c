"""What the installed jax offers the tracker, found once, where ``tandv_tb.jax`` is imported
(its first import: the floor is checked before any other module of the package touches
jax).

- **The floor**: jax older than ``versions.FLOORS["jax"]`` raises an ``ImportError``
  naming both versions (``versions.require``).
- **``get_opaque_trace_state``** (which trace is running: a collector computes statistics
  only of values of its own trace): in ``jax.extend.core`` from jax 0.10, in ``jax.core``
  before (where jax 0.10 deprecates it). Found by a try at import.
- **Flax NNX's names** (flax is imported only where a model uses it): flax 0.12.0 renamed
  the base of NNX objects ``nnx.Object`` to ``nnx.Pytree``; 0.12.1 added the functions
  ``nnx.iter_modules`` (before: the method ``Module.iter_modules``) and
  ``Variable.get_value`` (before: ``Variable.value``). Found with ``getattr``, the newer
  name first. ``nnx.jit``'s ``graph`` and ``graph_updates`` are newer than flax 0.12.0;
  before, it always took the graph and updated it, which is what ``True`` means
  (``nnx_jit_options`` leaves out what this flax's ``nnx.jit`` does not take). The Python
  function of an ``nnx.jit`` is its ``fun`` from flax 0.12, its ``__wrapped__`` before.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from types import ModuleType

from tandv_tb.versions import require

require("jax")

try:
    from jax.extend.core import get_opaque_trace_state
except ImportError:  # jax before 0.10
    from jax.core import get_opaque_trace_state

__all__ = [
    "get_opaque_trace_state",
    "nnx_iter_modules",
    "nnx_jit_options",
    "nnx_jitted_function",
    "nnx_object_type",
    "nnx_variable_value",
]


def nnx_object_type(nnx: ModuleType) -> type:
    """The base class of NNX modules and optimizers."""
    return getattr(nnx, "Pytree", None) or nnx.Object


def nnx_iter_modules(nnx: ModuleType, root: object) -> Iterator[tuple[tuple, object]]:
    """``(path, module)`` for ``root`` and every module under it."""
    iterate = getattr(nnx, "iter_modules", None)
    return iterate(root) if iterate is not None else root.iter_modules()


def nnx_variable_value(variable: object) -> object:
    """The value an NNX variable holds."""
    get_value = getattr(variable, "get_value", None)
    return get_value() if get_value is not None else variable.value


def nnx_jit_options(nnx: ModuleType, options: dict) -> dict:
    """``options`` for ``nnx.jit``, less the ones this flax's ``nnx.jit`` does not take
    (there only those meaning what it always does are given)."""
    taken = inspect.signature(nnx.jit).parameters
    return {name: value for name, value in options.items() if name in taken}


def nnx_jitted_function(wrapped: object) -> object:
    """The Python function an ``nnx.jit`` wrapper compiles."""
    fun = getattr(wrapped, "fun", None)
    return fun if fun is not None else wrapped.__wrapped__
