"""An identity with a custom VJP: sees a module output's primal value in the forward pass
and its cotangent in the backward pass, at the level of the trace that differentiates.

Under ``jax.grad`` a module's output is a JVP tracer: statistics computed from it directly
would be tracers of the differentiation and could not leave it. The forward rule of a
``custom_vjp`` runs on the primal value one level up, and the backward rule on the
cotangent, so what they compute belongs to the enclosing program (``jax.jit``) or is a
concrete array (eager mode). The identity changes no value.
"""

from __future__ import annotations

from collections.abc import Callable

import jax


def probe(
    x: jax.Array,
    on_forward: Callable[[jax.Array], None],
    on_backward: Callable[[jax.Array], None] | None,
) -> tuple[jax.Array, bool]:
    """``x`` unchanged, with ``on_forward(primal)`` called now if ``x`` is being
    differentiated and ``on_backward(cotangent)`` when its cotangent is computed.

    Also returns whether the forward rule ran (False: ``x`` is not differentiated here).
    """
    ran = []

    @jax.custom_vjp
    def identity(value):
        return value

    def forward(value):
        ran.append(True)
        on_forward(value)
        return value, None

    def backward(_, cotangent):
        if on_backward is not None:
            on_backward(cotangent)
        return (cotangent,)

    identity.defvjp(forward, backward)
    return identity(x), bool(ran)
