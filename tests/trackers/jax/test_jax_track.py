"""``track`` on small Flax linen models, jitted and not: what is recorded, under which names."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tandv_tb import versions
from tandv_tb.jax import UntrackableArrayWarning, track
from tandv_tb.stats import engine
from tandv_tb.stats.tensor_stats import TensorStats
from tests.helpers.jax_models import (
    GPT,
    MLP,
    assert_same,
    expected,
    gpt_loss,
    mlp_batch,
    mlp_loss,
    output_shapes,
    read_records,
    sgd_update,
    tokens,
)
from tests.helpers.reference import assert_matches, crafted, random_binades

MLP_MODEL = MLP()
MLP_LOSS = lambda params, batch: mlp_loss(MLP_MODEL, params, batch)  # noqa: E731


def mlp_params():
    return jax.jit(MLP_MODEL.init)(jax.random.PRNGKey(0), jnp.zeros((1, 6)))


def mlp_update(optimizer):
    """The MLP's update with the oracle (not jitted)."""
    return sgd_update(MLP_LOSS, optimizer, output_shapes(MLP_LOSS, mlp_params(), mlp_batch(0)))


def _train_mlp(logdir, update, steps=2, **options):
    """Tracked MLP training; returns every step's oracle and the arrays given to step()."""
    params = mlp_params()
    optimizer = optax.adam(1e-2)
    opt_state = optimizer.init(params)
    seen = []
    with track(model_state=params, optimizer_state=opt_state, logdir=logdir, **options) as t:
        for step in range(steps):
            params, opt_state, grads, oracle = t.intercept(
                update, params, opt_state, mlp_batch(step)
            )
            t.step(params, opt_state, grads)
            seen.append((params, opt_state, grads, oracle))
    return seen


@pytest.fixture(scope="module", params=["jit", "eager"])
def mlp_run(request, tmp_path_factory):
    update = mlp_update(optax.adam(1e-2))
    if request.param == "jit":
        update = jax.jit(update)
    logdir = str(tmp_path_factory.mktemp(f"mlp_{request.param}"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing in this model is skipped
        # what an older jax lacks is said apart (test_framework_features.py)
        warnings.simplefilter("default", versions.NewerReleaseWarning)
        seen = _train_mlp(logdir, update)
    return read_records(logdir), seen


def test_activations_and_gradients_equal_the_engine_on_the_same_arrays(mlp_run):
    records, seen = mlp_run
    for step, (_, _, _, (outputs, cotangents)) in enumerate(seen):
        assert {n for n, t, s in records if s == step and t == "Activation"} == set(outputs)
        assert {n for n, t, s in records if s == step and t == "Gradient"} == set(cotangents)
        for name, calls in outputs.items():
            assert_same(records[name, "Activation", step].record, expected(calls))
            assert_same(records[name, "Gradient", step].record, expected(cotangents[name]))


def test_names_tuple_outputs_and_a_module_called_twice(mlp_run):
    records, _ = mlp_run
    activations = {n: s for (n, t, step), s in records.items() if t == "Activation" and step == 0}
    assert set(activations) == {"inp", "shared", "norm", "out", "MLP", "MLP.1"}
    # Called twice: one record covering both calls (8 x 16 values each).
    assert activations["shared"].record.numel == 2 * 8 * 16
    assert activations["norm"].module_type == "LayerNorm"
    # Ordered by first execution (the root's output comes last, as in torch).
    by_order = sorted(activations, key=lambda n: activations[n].order)
    assert by_order == ["inp", "shared", "norm", "out", "MLP", "MLP.1"]


def test_weights_gradients_and_adam_state_equal_the_engine(mlp_run):
    records, seen = mlp_run
    params, opt_state, grads, _ = seen[-1]
    adam = opt_state[0]
    names = ["inp", "shared", "norm", "out"]
    leaves = {"inp": ("kernel", "bias"), "shared": ("kernel", "bias"), "out": ("kernel", "bias")}
    leaves["norm"] = ("scale", "bias")  # LayerNorm scales too, not only kernels
    for module in names:
        for leaf in leaves[module]:
            name = f"{module}.{leaf}"
            for tensor_type, tree in [
                ("Weight", params),
                ("Weight_Gradient", grads),
                ("Optimiser_State.mu", adam.mu),
                ("Optimiser_State.nu", adam.nu),
            ]:
                stored = records[name, tensor_type, 1]
                assert_same(stored.record, expected(tree["params"][module][leaf]), rtol=0)
    types = {t for _, t, _ in records}
    assert types == {
        "Activation",
        "Gradient",
        "Weight",
        "Weight_Gradient",
        "Optimiser_State.mu",
        "Optimiser_State.nu",
    }  # Adam's scalar count is skipped
    # Parameters are ordered by the first execution of their module, not alphabetically.
    weights = {n: s.order for (n, t, step), s in records.items() if t == "Weight" and step == 0}
    assert sorted(weights, key=weights.get) == [
        "inp.bias",
        "inp.kernel",
        "shared.bias",
        "shared.kernel",
        "norm.bias",
        "norm.scale",
        "out.bias",
        "out.kernel",
    ]
    assert records["norm.scale", "Weight", 0].module_type == "LayerNorm"


def test_transformer_jitted_names_attention_layernorm_and_tied_embedding(tmp_path):
    model = GPT()
    batch = tokens(0)
    params = jax.jit(model.init)(jax.random.PRNGKey(0), batch[:, :-1])
    optimizer = optax.adamw(1e-2)
    opt_state = optimizer.init(params)
    loss = lambda p, t: gpt_loss(model, p, t)  # noqa: E731
    update = jax.jit(sgd_update(loss, optimizer, output_shapes(loss, params, batch)))
    with track(model_state=params, optimizer_state=opt_state, logdir=str(tmp_path)) as tracker:
        params, opt_state, grads, (outputs, cotangents) = tracker.intercept(
            update, params, opt_state, batch
        )
        tracker.step(params, opt_state, grads)
    records = read_records(str(tmp_path))
    attention = "Block_0.MultiHeadDotProductAttention_0"
    expected_names = {
        "Embed_0",
        "Block_0.LayerNorm_0",
        f"{attention}.query",
        f"{attention}.key",
        f"{attention}.value",
        f"{attention}.out",
        attention,
        "Block_0.LayerNorm_1",
        "Block_0.Dense_0",
        "Block_0.Dense_1",
        "Block_0",
        "Block_0.1",  # the block's tuple output
        "LayerNorm_0",
        "Embed_0.attend",  # the tied output projection: another method of Embed_0
        "GPT",
    }
    assert {n for n, t, _ in records if t == "Activation"} == expected_names
    # The attention output the model drops has no gradient (as in torch).
    assert {n for n, t, _ in records if t == "Gradient"} == expected_names - {"Block_0.1"}
    for name in expected_names:
        assert_same(records[name, "Activation", 0].record, expected(outputs[name]))
        if name != "Block_0.1":
            assert_same(records[name, "Gradient", 0].record, expected(cotangents[name]))
    assert records[f"{attention}.query", "Activation", 0].module_type == "DenseGeneral"
    weights = {n for n, t, _ in records if t == "Weight"}
    assert {"pos", "Embed_0.embedding", f"{attention}.query.kernel", "LayerNorm_0.scale"} <= weights
    assert {n for n, t, _ in records if t == "Optimiser_State.mu"} == weights


def test_training_is_bitwise_unchanged_and_every_n_compiles_once(tmp_path):
    optimizer = optax.adam(1e-2)
    traces = []

    def loss_grads(params, opt_state, batch):
        traces.append(1)  # runs once per trace, not per call
        grads = jax.grad(MLP_LOSS)(params, batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, grads

    update = jax.jit(loss_grads, donate_argnums=(0, 1))

    def train(tracked_every=None):
        params = mlp_params()
        opt_state = optimizer.init(params)
        if tracked_every is None:
            for step in range(20):
                params, opt_state, _ = update(params, opt_state, mlp_batch(step))
            return params
        logdir = str(tmp_path / f"every{tracked_every}")
        with track(model_state=params, logdir=logdir, every=tracked_every) as tracker:
            for step in range(20):
                params, opt_state, grads = tracker.intercept(
                    update, params, opt_state, mlp_batch(step)
                )
                tracker.step(params, grads=grads)
        return params, read_records(logdir)

    plain = train()
    assert len(traces) == 1
    for every in (1, 7):
        tracked, records = train(every)
        jax.tree.map(np.testing.assert_array_equal, tracked, plain)
        assert {step for _, _, step in records} == set(range(0, 20, every))
    # The user's program once, one tracked program per tracker and, where some steps are
    # not tracked (every=7), the non-finite watch's program: no step recompiles.
    assert len(traces) == 4


def test_include_exclude_formats_and_track_gradients(tmp_path):
    update = jax.jit(mlp_update(optax.adam(1e-2)))
    formats = ("float8_e4m3fn", "bfloat16")
    seen = _train_mlp(
        str(tmp_path),
        update,
        steps=1,
        include="shared|norm",
        exclude=r"\.bias$",
        formats=formats,
        track_gradients=False,
    )
    records = read_records(str(tmp_path))
    assert {(n, t) for n, t, _ in records} == {
        ("shared", "Activation"),
        ("norm", "Activation"),
        ("shared.kernel", "Weight"),
        ("norm.scale", "Weight"),
        ("shared.kernel", "Optimiser_State.mu"),
        ("norm.scale", "Optimiser_State.mu"),
        ("shared.kernel", "Optimiser_State.nu"),
        ("norm.scale", "Optimiser_State.nu"),
    }
    outputs = seen[0][3][0]
    stored = records["shared", "Activation", 0]
    assert stored.formats == formats
    assert_same(stored.record, expected(outputs["shared"], formats))
    params = seen[0][0]
    assert_same(
        records["norm.scale", "Weight", 0].record,
        expected(params["params"]["norm"]["scale"], formats),
        rtol=0,
    )


def test_untrackable_leaves_warn_once_and_counters_are_silent(tmp_path):
    state = {
        "params": {"w": jnp.ones((3, 2))},
        "rng": jax.random.PRNGKey(0),  # a raw uint32 key
        "key": jax.random.key(1),  # a typed key
        "step": jnp.asarray(3),  # a counter
        "ids": jnp.arange(4),
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with track(model_state=state, logdir=str(tmp_path)) as tracker:
            for _ in range(3):
                tracker.step(state)
    messages = sorted(str(w.message) for w in caught if w.category is UntrackableArrayWarning)
    assert len(messages) == 3, messages
    assert "'ids'" in messages[0] and "int32 is not a float dtype" in messages[0]
    assert "'key'" in messages[1] and "PRNG key" in messages[1]
    assert "'rng'" in messages[2] and "uint32" in messages[2]
    records = read_records(str(tmp_path))
    assert {(n, t) for n, t, _ in records} == {("w", "Weight")}


def test_modules_inside_scan_or_remat_are_skipped_with_one_warning(tmp_path):
    from flax import linen as nn

    class Scanned(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.remat(nn.Dense)(4, name="remat")(x)
            body = nn.scan(
                lambda module, carry, _: (nn.Dense(4)(carry), None),
                variable_broadcast="params",
                split_rngs={"params": False},
                length=2,
            )
            x, _ = body(self, x, None)
            return nn.Dense(2, name="head")(x)

    model = Scanned()
    params = model.init(jax.random.PRNGKey(0), jnp.ones((2, 4)))
    loss = jax.jit(jax.grad(lambda p, x: jnp.sum(model.apply(p, x) ** 2)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with track(logdir=str(tmp_path)) as tracker:
            for _ in range(2):
                tracker.intercept(loss, params, jnp.ones((2, 4)))
                tracker.step()
    skipped = [str(w.message) for w in caught if w.category is UntrackableArrayWarning]
    assert any("'remat'" in m and "jax.checkpoint" in m for m in skipped), skipped
    assert len(skipped) == len(set(skipped))  # once each, not once per step
    records = read_records(str(tmp_path))
    assert {n for n, t, _ in records if t == "Activation"} >= {"head", "Scanned"}
    assert ("remat", "Activation", 0) not in records


def test_bad_arguments_give_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="every"):
        track(logdir=str(tmp_path), every=0)
    with pytest.raises(ValueError, match="unknown float format"):
        track(logdir=str(tmp_path), formats=("float7",))
    with pytest.raises(ValueError, match="include"):
        track(logdir=str(tmp_path), include="(")
    params = {"w": jnp.ones(2)}
    with track(model_state=params, logdir=str(tmp_path)) as tracker:
        with pytest.raises(TypeError, match="function"):
            tracker.intercept(3)
        with pytest.raises(ValueError, match="step\\(\\) needs the current model_state"):
            tracker.step()
    with pytest.raises(RuntimeError, match="closed"):
        tracker.step(params)


def test_jit_options_are_kept_and_micro_batches_merge(tmp_path):
    from flax import linen as nn

    model = nn.Dense(3)
    optimizer = optax.sgd(0.1)

    def accumulate(params, grads, optimizer, x, *, scale):
        step_grads = jax.grad(lambda p: scale * jnp.sum(model.apply(p, x) ** 2))(params)
        return jax.tree.map(jnp.add, grads, step_grads)

    # tandv's style: the optimizer is a static argument; the gradients buffer is donated
    jitted = jax.jit(accumulate, static_argnums=2, static_argnames="scale", donate_argnums=1)
    params = model.init(jax.random.PRNGKey(0), jnp.ones((2, 4)))
    with track(logdir=str(tmp_path)) as tracker:
        for step in range(2):
            grads = jax.tree.map(jnp.zeros_like, params)
            for micro in range(2):  # gradient accumulation: two calls, one record
                x = jnp.full((2, 4), 1.0 + step + micro)
                grads = tracker.intercept(jitted, params, grads, optimizer, x, scale=0.5)
            updates, _ = optimizer.update(grads, optimizer.init(params))
            params = optax.apply_updates(params, updates)
            tracker.step(params, grads=grads)
    records = read_records(str(tmp_path))
    assert records["Dense", "Activation", 1].record.numel == 2 * 2 * 3
    assert records["Dense", "Gradient", 1].record.numel == 2 * 2 * 3
    assert {n for n, t, _ in records if t == "Weight_Gradient"} == {"kernel", "bias"}


def test_a_new_jit_of_the_same_function_is_not_compiled_again(tmp_path):
    from flax import linen as nn

    model = nn.Dense(2)
    params = model.init(jax.random.PRNGKey(0), jnp.ones((1, 3)))
    traces = []

    def forward(params, x):
        traces.append(1)
        return model.apply(params, x)

    with track(logdir=str(tmp_path)) as tracker:
        for step in range(3):
            tracker.intercept(jax.jit(forward), params, jnp.full((1, 3), float(step)))
            tracker.step()
    assert len(traces) == 1
    assert {s for _, _, s in read_records(str(tmp_path))} == {0, 1, 2}


@pytest.mark.parametrize(("dtype", "size"), [("float32", 65_537), ("bfloat16", 100_000)])
def test_compiled_kernel_on_large_arrays_matches_the_reference(dtype, size):
    """Arrays this large take the compiled kernel's histogram of key pairs (odd and even
    lengths) and its blocked sums; crafted values (zeros, subnormals, extremes, NaN, Inf)
    are spread through random ones spanning 60 binades."""
    special = crafted(dtype)
    values = np.concatenate([special, random_binades(dtype, size - len(special), seed=size)])
    np.random.default_rng(size).shuffle(values)
    formats = ("float8_e4m3fn", "float8_e5m2", "float4_e2m1fn")

    def kernel(x):
        pending = engine.compute(x, formats)
        return pending.counts, pending.moments

    counts, moments = jax.device_get(jax.jit(kernel)(jnp.asarray(values)))
    stats = TensorStats.unpack(dtype, formats, counts, moments)
    assert_matches(stats, values, formats, rtol=1e-4)
