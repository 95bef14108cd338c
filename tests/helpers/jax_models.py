"""Shared pieces of the JAX tracker tests (no tests here): small Flax models, an event
reader and an oracle that captures module outputs and their gradients without the tracker.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn
from flax import nnx

from tandv_tb.disk.record import NumericsRecord
from tandv_tb.stats import tensor_stats
from tests.helpers.tracker_records import Stored, read_records  # noqa: F401  (re-exported)


def expected(arrays, formats=()) -> NumericsRecord:
    """The engine's record of an array (or of several, concatenated), on the host."""
    if isinstance(arrays, (list, tuple)):
        arrays = np.concatenate([np.asarray(a).reshape(-1) for a in arrays])
    return tensor_stats(np.asarray(arrays), formats).to_record()


def assert_same(got: NumericsRecord, want: NumericsRecord, rtol: float = 1e-5) -> None:
    """Counts, bins, extremes and casts exactly; sums to float32 precision (the compiled
    program accumulates in float32, the host engine in float64). ``rtol=0``: every
    statistic as stored (rounded to float32) exactly."""
    assert got.dtype == want.dtype
    for field in ("numel", "zero_count", "nan_count", "posinf_count", "neginf_count"):
        assert getattr(got, field) == getattr(want, field), field
    assert got.exponent_histogram() == want.exponent_histogram()
    assert got.underflow == want.underflow and got.overflow == want.overflow
    for name in ("max_abs", "min_abs", "min_abs_nonzero"):
        np.testing.assert_array_equal(
            np.float32(got.statistics[name]), np.float32(want.statistics[name]), err_msg=name
        )
    for name, value in want.statistics.items():
        if rtol == 0:
            np.testing.assert_array_equal(
                np.float32(got.statistics[name]), np.float32(value), err_msg=name
            )
            continue
        atol = 1e-6 * want.statistics["max_abs"] if name == "mean" else 0
        np.testing.assert_allclose(got.statistics[name], value, rtol=rtol, atol=atol, err_msg=name)


# -- models ---------------------------------------------------------------------------------


class MLP(nn.Module):
    """Dense layers, a LayerNorm, a tuple output and one Dense called twice."""

    width: int = 16

    def setup(self) -> None:
        self.inp = nn.Dense(self.width)
        self.shared = nn.Dense(self.width)
        self.norm = nn.LayerNorm()
        self.out = nn.Dense(4)

    def __call__(self, x):
        h = nn.relu(self.inp(x))
        h = self.shared(nn.relu(self.shared(h)))
        h = self.norm(h)
        return self.out(h), h


def mlp_loss(model: nn.Module, params, batch):
    x, y = batch
    prediction, hidden = model.apply(params, x)
    return jnp.mean((prediction - y) ** 2) + 0.1 * jnp.mean(hidden**2)


class Block(nn.Module):
    """Pre-LayerNorm transformer block; returns (output, attention output)."""

    heads: int = 2

    @nn.compact
    def __call__(self, x):
        h = nn.LayerNorm()(x)
        mask = nn.make_causal_mask(jnp.ones(x.shape[:2]))
        a = nn.MultiHeadDotProductAttention(num_heads=self.heads)(h, h, mask=mask)
        x = x + a
        h = nn.Dense(2 * x.shape[-1])(nn.LayerNorm()(x))
        return x + nn.Dense(x.shape[-1])(nn.gelu(h)), a


class GPT(nn.Module):
    """A tiny decoder: tied embedding (``Embed_0.attend``), blocks with tuple outputs."""

    vocab: int = 16
    width: int = 8
    depth: int = 1

    @nn.compact
    def __call__(self, tokens):
        embed = nn.Embed(self.vocab, self.width)
        position = self.param("pos", nn.initializers.normal(0.02), (tokens.shape[1], self.width))
        x = embed(tokens) + position
        for _ in range(self.depth):
            x, _ = Block()(x)
        return embed.attend(nn.LayerNorm()(x))


def gpt_loss(model: nn.Module, params, tokens):
    logits = model.apply(params, tokens[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()


class NnxMLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.first = nnx.Linear(6, 12, rngs=rngs)
        self.norm = nnx.LayerNorm(12, rngs=rngs)
        self.last = nnx.Linear(12, 3, rngs=rngs)

    def __call__(self, x):
        return self.last(self.norm(jax.nn.relu(self.first(x))))


def mlp_batch(seed: int, batch: int = 8):
    keys = jax.random.split(jax.random.PRNGKey(seed))
    return jax.random.normal(keys[0], (batch, 6)), jax.random.normal(keys[1], (batch, 4))


def tokens(seed: int, batch: int = 2, length: int = 7, vocab: int = 16):
    return jax.random.randint(jax.random.PRNGKey(seed), (batch, length), 0, vocab)


# -- an oracle: module outputs and their gradients, captured without the tracker ------------


def _leaves(output, name: str):
    """``(name, array)`` of a module output: an array or a flat tuple of arrays."""
    if isinstance(output, jax.Array):
        return [(name, output)]
    return [(name if i == 0 else f"{name}.{i}", leaf) for i, leaf in enumerate(output)]


def _capture(loss_fn, perturbations):
    """``loss_fn()`` with every module output x replaced by x + its perturbation (zeros),
    returning the loss and the outputs by name, one per call."""
    captured: dict[str, list] = {}

    def interceptor(next_fun, args, kwargs, context):
        output = next_fun(*args, **kwargs)
        method = context.method_name
        if method != "__call__" and (method.startswith("_") or method == "setup"):
            return output
        name = ".".join(context.module.path) or type(context.module).__name__
        if method != "__call__":
            name = f"{name}.{method}"
        replaced = []
        for leaf_name, leaf in _leaves(output, name):
            calls = captured.setdefault(leaf_name, [])
            if perturbations is not None:
                leaf = leaf + perturbations[leaf_name][len(calls)]
            calls.append(leaf)
            replaced.append(leaf)
        return replaced[0] if isinstance(output, jax.Array) else type(output)(replaced)

    with nn.intercept_methods(interceptor):
        loss = loss_fn()
    return loss, captured


def output_shapes(loss, params, *args):
    """The shapes of every module output of ``loss(params, *args)``, by name and call."""
    return jax.eval_shape(lambda: _capture(lambda: loss(params, *args), None))[1]


def loss_grads_and_oracle(loss, shapes, params, *args):
    """Gradients of ``loss(params, *args)`` w.r.t. ``params``, with every module output
    (``{name: [per call]}``) and the gradient of the loss w.r.t. each."""
    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    def perturbed(p, perturbations):
        return _capture(lambda: loss(p, *args), perturbations)

    (grads, cotangents), outputs = jax.grad(perturbed, argnums=(0, 1), has_aux=True)(params, zeros)
    return grads, outputs, cotangents


def sgd_update(loss, optimizer, shapes):
    """``update(params, opt_state, *args) -> (params, opt_state, grads, oracle)``, for
    arguments of the shapes ``output_shapes`` was given."""

    def update(params, opt_state, *args):
        grads, outputs, cotangents = loss_grads_and_oracle(loss, shapes, params, *args)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, grads, (outputs, cotangents)

    return update
