"""A jitted function compiled once more, returning the statistics of what it records.

``tracker.intercept`` cannot add outputs to a program the user compiled, so a function made
by ``jax.jit`` (or ``nnx.jit``) is compiled again from the same Python function and the
same options, with module interception active while it is traced. The program returns the
user's outputs and three small arrays: which ``Layout`` of slots the trace produced (a
constant of the program) and every recorded value's counts and moments, packed. Nothing
else leaves the program; the user's own compiled function still runs on untracked steps.
The watch's variant may also return a small array computed from the user's outputs
(``count_outputs``: their NaN/Inf counts, which ``step()`` reuses).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp

from tandv_tb.jax import features
from tandv_tb.jax.collector import Collector
from tandv_tb.jax.interception import run_intercepted
from tandv_tb.stats.engine import Packed, Slot


class UnsupportedJit(Exception):
    """A jitted function whose options cannot be reproduced."""


@dataclasses.dataclass(frozen=True)
class Unwrapped:
    """A jitted function's Python function, its jit flavour and its options."""

    flavour: str  # "jax" or "nnx"
    fun: Callable
    options: dict


def _unspecified(value: object) -> bool:
    return type(value).__name__ == "UnspecifiedValue"


#: The options of a ``jax.jit`` that say how arguments are treated (nnx.jit's too).
_ARGUMENT_OPTIONS = (
    "static_argnums",
    "static_argnames",
    "donate_argnums",
    "donate_argnames",
    "keep_unused",
    "inline",
)


def _argument_options(info) -> dict:
    """The options of a ``jax.jit`` that say how arguments are treated."""
    return {name: getattr(info, name) for name in _ARGUMENT_OPTIONS}


def _jax_options(info) -> dict:
    if any(layout is not None for layout in (*info.in_layouts_leaves, *info.out_layouts_leaves)):
        raise UnsupportedJit("jax.jit with in_layouts/out_layouts")
    options = _argument_options(info)
    if info.user_specified_in_shardings:
        options["in_shardings"] = info.in_shardings_treedef.unflatten(info.in_shardings_leaves)
    if not all(_unspecified(leaf) for leaf in info.out_shardings_leaves):
        user = info.out_shardings_treedef.unflatten(info.out_shardings_leaves)
        options["out_shardings"] = (user, None)
    if info.device is not None:
        options["device"] = info.device
    if info.backend is not None:
        options["backend"] = info.backend
    if info.compiler_options_kvs:
        options["compiler_options"] = dict(info.compiler_options_kvs)
    return options


def _nnx_options(wrapped) -> dict:
    if getattr(wrapped, "partial_args", ()):
        raise UnsupportedJit("nnx.jit with partial arguments")
    if wrapped.in_shardings is not None or wrapped.out_shardings is not None:
        raise UnsupportedJit("nnx.jit with in_shardings/out_shardings")
    simple = type(wrapped).__name__ == "SimpleJitWrapped"
    return dict(
        _argument_options(wrapped.jitted_fn._jit_info),
        graph=wrapped.graph if simple else True,
        graph_updates=not simple,
    )


def unwrap(fn: object) -> Unwrapped | None:
    """How ``fn`` was jitted, or None for a function that is not (``UnsupportedJit`` for
    one whose options cannot be reproduced)."""
    # ``_jit_info`` is private, pinned by tests/project/test_private_api_pins.py: jax has no public
    # way to read a jitted function's options (static and donated arguments, shardings).
    # Without them a tracked step could only run the function eagerly: 2.26x of plain
    # training against 1.28x compiled again with them (bench/private_apis.py).
    # The Python function is the public ``__wrapped__``.
    info = getattr(fn, "_jit_info", None)
    if info is not None and callable(getattr(fn, "__wrapped__", None)):
        return Unwrapped("jax", fn.__wrapped__, _jax_options(info))
    if type(fn).__name__ in ("JitWrapped", "SimpleJitWrapped") and hasattr(fn, "jitted_fn"):
        return Unwrapped("nnx", features.nnx_jitted_function(fn), _nnx_options(fn))
    return None


class TrackedFunction:
    """``unwrapped`` compiled with interception; calls return ``(outputs, Packed,
    output_counts)``: the statistics of what the collector recorded (``stats.Packed``,
    labelled ``(name, tensor type, module type)``), and what ``count_outputs`` (traced on
    the outputs, where given) returned (else None).
    """

    def __init__(
        self,
        unwrapped: Unwrapped,
        new_collector: Callable[[], Collector],
        on_trace: Callable[[Collector], None],
        count_outputs: Callable[[object], jax.Array] | None = None,
    ) -> None:
        self._layouts: list[list[Slot]] = []
        inner = unwrapped.fun

        @functools.wraps(inner)
        def traced(*args, **kwargs):
            collector = new_collector()
            outputs = run_intercepted(collector, inner, args, kwargs)
            slots, counts, moments = collector.pack()
            on_trace(collector)
            self._layouts.append(slots)
            layout = jnp.asarray(len(self._layouts) - 1, jnp.int32)
            extra = None if count_outputs is None else count_outputs(outputs)
            return outputs, (layout, counts, moments, extra)

        if unwrapped.flavour == "nnx":
            from flax import nnx

            self._jitted = nnx.jit(traced, **features.nnx_jit_options(nnx, unwrapped.options))
        else:
            self._jitted = jax.jit(traced, **unwrapped.options)

    def __call__(self, *args, **kwargs) -> tuple[object, Packed, jax.Array | None]:
        outputs, (layout, counts, moments, extra) = self._jitted(*args, **kwargs)
        return outputs, Packed(self._layouts, layout, counts, moments), extra
