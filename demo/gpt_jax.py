"""The same kind of GPT-style byte model in Flax (linen), trained under ``jax.jit`` and
tracked with tandv_tb.jax.track; the loss goes to TensorBoard as an ordinary scalar."""

from __future__ import annotations

import pathlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

import tandv_tb.jax
from demo.corpus import VOCAB, batches

FORMATS = ("float8_e4m3fn", "float8_e5m2")


class Block(nn.Module):
    width: int
    heads: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = nn.LayerNorm()(x)
        mask = nn.make_causal_mask(jnp.ones(x.shape[:2]))
        x = x + nn.MultiHeadDotProductAttention(num_heads=self.heads)(h, h, mask=mask)
        h = nn.LayerNorm()(x)
        return x + nn.Dense(self.width)(nn.gelu(nn.Dense(4 * self.width)(h)))


class GPT(nn.Module):
    width: int = 64
    heads: int = 4
    depth: int = 2
    seq: int = 64

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        position = self.param("position", nn.initializers.zeros, (self.seq, self.width))
        x = nn.Embed(VOCAB, self.width)(tokens) + position[: tokens.shape[1]]
        for _ in range(self.depth):
            x = Block(self.width, self.heads)(x)
        return nn.Dense(VOCAB)(nn.LayerNorm()(x))


def _scalar_event(tag: str, value: float, step: int) -> event_pb2.Event:
    summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
    return event_pb2.Event(step=step, summary=summary)


def train(logdir: pathlib.Path, data, *, lr: float, steps: int, every: int, seed: int = 0):
    model = GPT()
    stream = batches(data, batch=16, seq=64, seed=seed)
    params = model.init(jax.random.PRNGKey(seed), jnp.asarray(next(stream)[0]))
    optimizer = optax.adamw(lr, weight_decay=0.0)
    opt_state = optimizer.init(params)

    @jax.jit
    def update(params, opt_state, inputs, targets):
        def loss_fn(p):
            logits = model.apply(p, inputs)
            return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, grads, loss

    scalars = EventFileWriter(str(logdir))
    with tandv_tb.jax.track(
        params, opt_state, logdir=str(logdir), every=every, formats=FORMATS
    ) as tracker:
        for step in range(steps):
            inputs, targets = (jnp.asarray(a) for a in next(stream))
            params, opt_state, grads, loss = tracker.intercept(
                update, params, opt_state, inputs, targets
            )
            tracker.step(params, opt_state, grads)
            scalars.add_event(_scalar_event("loss", float(loss), step))
            scalars.add_event(_scalar_event("learning_rate", lr, step))
    scalars.close()
