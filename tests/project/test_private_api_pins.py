"""The private APIs of other libraries that tandv_tb still uses, pinned: each test fails,
naming the library and its version, when an upgrade changes what tandv_tb relies on.

Why each one stays (and what it buys) is written where it is used:
``tandv_tb.event_files.user_writer`` (``SummaryWriter._get_file_writer``), ``tandv_tb.store.logdir``
(``data_ingester._parse_event_files_spec``), ``tandv_tb.torch.compiled``
(``torch._C._current_graph_task_id``, the attributes which mark compiled modules, an
operator's ordered effect), ``tandv_tb.torch.memo`` (``Tensor._version``),
``tandv_tb.torch.naming`` and ``tandv_tb.torch.tracker`` (the attributes through which
wrappers hold the module they wrap, and optimizers that set up their hooks),
``tandv_tb.torch.parallel_layout`` (the DTensor spec ``to_local``'s autograd node keeps,
the values of an ``AsyncCollectiveTensor``),
``tandv_tb.torch.pipeline_stage`` (a pipeline stage's metadata),
``tandv_tb.torch.graph_replay`` and ``graph_recording`` (where a module keeps its hooks, a
view's ``_base``), ``tandv_tb.jax.graph_capture`` (the equation a traced array came from),
``tandv_tb.jax.compiled`` (``_jit_info`` of ``jax.jit``, the attributes of ``nnx.jit``'s
wrappers) and ``tandv_tb.stats._xla_cpu`` (XLA FFI structures read at fixed offsets).
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest
import tensorboardX
import torch
from torch.utils.tensorboard import SummaryWriter


def _changed(library: str, version: str, what: str) -> str:
    return f"{library} {version} changed {what}: see the comment where tandv_tb uses it"


# ---------------------------------------------------------------- --logdir_spec


def test_tensorboard_splits_a_logdir_spec_by_its_own_function():
    from tensorboard import version
    from tensorboard.backend.event_processing import data_ingester

    message = _changed("tensorboard", version.VERSION, "data_ingester._parse_event_files_spec")
    parse = getattr(data_ingester, "_parse_event_files_spec", None)
    assert callable(parse), message
    found = parse("a:/x/one,b:s3://bucket/runs,/y/two")
    assert found == {"/x/one": "a", "s3://bucket/runs": "b", "/y/two": None}, message


# ---------------------------------------------------------------- threading


def test_python_runs_threading_exit_hooks_before_executors_stop():
    """``writer._close_before_executors_stop``: a hook registered there still submits to an
    executor at interpreter exit (what a last object written through fsspec needs)."""
    import sys

    code = (
        "import threading, concurrent.futures\n"
        "pool = concurrent.futures.ThreadPoolExecutor(1)\n"
        "threading._register_atexit(lambda: print(pool.submit(lambda: 'ran').result()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    message = _changed("Python", sys.version, "threading._register_atexit")
    assert out.stdout.strip() == "ran", message


# ---------------------------------------------------------------- SummaryWriter


@pytest.mark.parametrize("kind", ["torch", "tensorboardX"])
def test_summary_writers_hand_out_their_file_writer_and_reopen_it(tmp_path, kind):
    if kind == "torch":
        user, version = SummaryWriter(tmp_path), torch.__version__
    else:
        user, version = tensorboardX.SummaryWriter(tmp_path), tensorboardX.__version__
    message = _changed(kind, version, "SummaryWriter._get_file_writer()")
    assert callable(getattr(user, "_get_file_writer", None)), message
    file_writer = user._get_file_writer()
    assert callable(getattr(file_writer, "add_summary", None)), message
    assert pathlib.Path(file_writer.get_logdir()) == tmp_path, message
    user.close()
    reopened = user._get_file_writer()  # as the writer's own add_* methods do after close
    assert reopened is not None and callable(reopened.add_summary), message
    user.close()


# ---------------------------------------------------------------- torch autograd


def test_torch_tells_a_forward_run_inside_a_backward_pass():
    message = _changed("torch", torch.__version__, "torch._C._current_graph_task_id")
    assert callable(getattr(torch._C, "_current_graph_task_id", None)), message
    assert torch._C._current_graph_task_id() == -1, message
    seen = []
    x = torch.ones(2, requires_grad=True)
    y = x * 2
    y.register_hook(lambda grad: seen.append(torch._C._current_graph_task_id()))
    y.sum().backward()
    assert len(seen) == 1 and seen[0] != -1, message


def test_a_tensors_version_counts_its_in_place_changes():
    message = _changed("torch", torch.__version__, "Tensor._version")
    x = torch.zeros(3)
    before = x._version
    y = x + 1  # not in place
    assert x._version == before and isinstance(before, int), message
    x.add_(1)
    x[0] = 5.0
    assert x._version == before + 2, message
    assert y._version == 0, message


def test_wrappers_hold_the_module_they_wrap_where_naming_looks():
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    from tandv_tb.torch.naming import _WRAPPED_ATTRIBUTES, unwrap

    message = _changed("torch", torch.__version__, f"the wrappers' {_WRAPPED_ATTRIBUTES}")
    inner = torch.nn.Linear(2, 2)
    compiled = torch.compile(inner)
    assert compiled._modules.get("_orig_mod") is inner, message
    wrapped = checkpoint_wrapper(inner)
    assert wrapped._modules.get("_checkpoint_wrapped_module") is inner, message
    assert unwrap(compiled) is inner and unwrap(wrapped) is inner, message
    # FSDP1 (FullyShardedDataParallel) needs a process group: its attribute is read where
    # tests/trackers/torch/test_torch_distributed.py wraps a model and checks the names.
    assert "_fsdp_wrapped_module" in _WRAPPED_ATTRIBUTES


def test_to_local_keeps_the_dtensor_spec_and_a_pipeline_stage_its_metadata():
    """``tandv_tb.torch.parallel_layout.provenance`` (the autograd node of ``to_local``
    keeps ``dtensor_spec``) and ``local`` (``AsyncCollectiveTensor.wait``), and
    ``tandv_tb.torch.pipeline_stage.Stage.inferring`` (``PipelineStage._stage_meta``), on
    a process group of one rank."""
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.tensor import Shard, distribute_tensor

    from tandv_tb.torch.parallel_layout import local, provenance
    from tandv_tb.torch.pipeline_stage import stage_of

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        weight = distribute_tensor(torch.ones(4, 2), mesh, [Shard(0)]).requires_grad_()
        message = _changed("torch", torch.__version__, "_ToTorchTensor's ctx.dtensor_spec")
        assert provenance((weight * 2).to_local()) == (mesh, (Shard(0),)), message
        assert provenance(torch.ones(2, requires_grad=True) * 2) is None, message
        _, stage = stage_of(PipelineStage(torch.nn.Linear(2, 2), 0, 1, torch.device("cpu")))
        message = _changed("torch", torch.__version__, "PipelineStage._stage_meta")
        assert stage.inferring(), message  # no metadata before its first step
        pending = funcol.all_reduce(torch.ones(3), "sum", dist.group.WORLD)
        message = _changed("torch", torch.__version__, "funcol.AsyncCollectiveTensor.wait")
        assert isinstance(pending, funcol.AsyncCollectiveTensor), message
        assert type(local(pending)) is torch.Tensor and local(pending).tolist() == [1] * 3
    finally:
        dist.destroy_process_group()


def test_module_compile_marks_the_module_and_optimizers_keep_their_step_hooks():
    from tandv_tb.torch.compiled import is_compiled
    from tandv_tb.torch.tracker import _stepping_optimizer

    message = _changed("torch", torch.__version__, "Module._compiled_call_impl")
    module = torch.nn.Linear(2, 2)
    assert getattr(module, "_compiled_call_impl", None) is None, message
    module.compile()
    assert module._compiled_call_impl is not None and is_compiled(module), message
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    message = _changed("torch", torch.__version__, "Optimizer._optimizer_step_pre_hooks")
    assert hasattr(optimizer, "_optimizer_step_pre_hooks"), message
    assert _stepping_optimizer(optimizer) is optimizer, message


def test_a_modules_hooks_live_in_its_attributes_named_hooks_and_views_keep_their_base():
    """``graph_replay``'s shadow of a module drops its hooks by the names of the dicts that
    hold them; ``graph_recording`` follows a view autograd does not follow by its
    ``_base``."""
    from tandv_tb.torch.graph_replay import _shadow

    message = _changed("torch", torch.__version__, "where Module keeps its hooks")
    fired = []
    module = torch.nn.Linear(2, 2)
    module.register_forward_pre_hook(lambda *a: fired.append("pre"), with_kwargs=True)
    module.register_forward_hook(lambda *a: fired.append("post"), always_call=True)
    module.register_full_backward_pre_hook(lambda *a: fired.append("backward pre"))
    module.register_full_backward_hook(lambda *a: fired.append("backward"))
    _shadow(module, {})(torch.ones(1, 2, requires_grad=True)).sum().backward()
    assert fired == [], message
    base = torch.ones(4)
    message = _changed("torch", torch.__version__, "Tensor._base")
    assert base.view(2, 2)[0]._base is base, message


def test_an_ordered_effect_keeps_an_operator_that_returns_nothing_in_order():
    """``compiled.observe`` returns nothing: without its effect inductor would drop it."""
    seen = []

    @torch.library.custom_op("tandv_tb_pins::note", mutates_args=())
    def note(x: torch.Tensor, label: str) -> None:
        seen.append((label, float(x.sum())))

    note.register_fake(lambda x, label: None)
    note.register_effect(torch.library.EffectType.ORDERED)

    def f(x):
        y = x * 2
        note(y, "first")
        z = y + 1
        note(z, "second")
        return z.sum()

    torch._dynamo.reset()
    torch.compile(f, fullgraph=True)(torch.ones(3))
    assert seen == [("first", 6.0), ("second", 9.0)], _changed(
        "torch", torch.__version__, "CustomOpDef.register_effect / EffectType.ORDERED"
    )


# ---------------------------------------------------------------- jax.jit and nnx.jit


def test_a_traced_array_keeps_the_equation_that_made_it():
    """``tandv_tb.jax.graph_capture`` follows a traced array back to the arrays it was
    computed from: ``DynamicJaxprTracer.parent.in_tracers``, under differentiation through
    the tracers' ``primal``. Without them the JAX graph has edges by identity only."""
    import jax

    message = _changed("jax", jax.__version__, "DynamicJaxprTracer.parent.in_tracers, .primal")
    seen = []

    def f(x):
        y = x * 2
        z = y + 1
        seen.append((y, z))
        return z.sum()

    jax.jit(jax.grad(f))(jax.numpy.ones(3))
    y, z = seen[0]
    while hasattr(y, "primal"):
        y, z = y.primal, z.primal
    assert any(t is y for t in z.parent.in_tracers), message


def test_jax_jit_keeps_its_function_and_options():
    import jax
    from jax.sharding import SingleDeviceSharding

    from tandv_tb.jax.compiled import _ARGUMENT_OPTIONS, unwrap

    message = _changed("jax", jax.__version__, "what jax.jit keeps (_jit_info, __wrapped__)")

    def f(x, n):
        return x * n

    jitted = jax.jit(f, static_argnums=(1,), donate_argnums=(0,))
    info = getattr(jitted, "_jit_info", None)
    assert info is not None and jitted.__wrapped__ is f, message
    used = (
        *_ARGUMENT_OPTIONS,
        "in_layouts_leaves",
        "out_layouts_leaves",
        "user_specified_in_shardings",
        "in_shardings_treedef",
        "in_shardings_leaves",
        "out_shardings_treedef",
        "out_shardings_leaves",
        "device",
        "backend",
        "compiler_options_kvs",
    )
    missing = [name for name in used if not hasattr(info, name)]
    assert not missing, f"{message}: no {missing}"
    unwrapped = unwrap(jitted)
    assert unwrapped.fun is f, message
    assert unwrapped.options["static_argnums"] == (1,), message
    assert unwrapped.options["donate_argnums"] == (0,), message
    assert "out_shardings" not in unwrapped.options, message  # unspecified is recognised
    sharding = SingleDeviceSharding(jax.devices()[0])
    with_sharding = unwrap(jax.jit(f, static_argnums=(1,), out_shardings=sharding))
    assert with_sharding.options["out_shardings"] == (sharding, None), message


def test_nnx_jit_wrappers_keep_their_function_and_options():
    import flax
    from flax import nnx

    from tandv_tb.jax.compiled import unwrap

    message = _changed("flax", flax.__version__, "the attributes of nnx.jit's wrapper")

    def f(model, x, n):
        return model(x) * n

    jitted = nnx.jit(f, static_argnums=(2,))
    assert type(jitted).__name__ in ("JitWrapped", "SimpleJitWrapped"), message
    for name in ("fun", "jitted_fn", "in_shardings", "out_shardings"):
        assert hasattr(jitted, name), f"{message}: no {name}"
    assert hasattr(jitted.jitted_fn, "_jit_info"), message
    unwrapped = unwrap(jitted)
    assert unwrapped.flavour == "nnx" and unwrapped.fun is f, message
    assert unwrapped.options["static_argnums"] == (2,), message


# ---------------------------------------------------------------- XLA FFI structures

_OFFSETS_C = r"""
#include <stddef.h>
#include <stdio.h>
#include "xla/ffi/api/c_api.h"
#define W(x) ((long)(x) / 8)
#define I(x) ((long)(x) / 4)
int main(void) {
  printf("_API_MAJOR %d\n", XLA_FFI_API_MAJOR);
  printf("_API_MINOR %d\n", XLA_FFI_API_MINOR);
  printf("_METADATA_EXTENSION %d\n", (int)XLA_FFI_Extension_Metadata);
  printf("_EXECUTE %d\n", (int)XLA_FFI_ExecutionStage_EXECUTE);
  printf("_S64 %d\n", (int)XLA_FFI_DataType_S64);
  printf("_F64 %d\n", (int)XLA_FFI_DataType_F64);
  printf("_EXTENSION_TYPE %ld\n", W(offsetof(XLA_FFI_Extension_Base, type)));
  printf("_EXTENSION_METADATA %ld\n", W(offsetof(XLA_FFI_Metadata_Extension, metadata)));
  printf("_FRAME_EXTENSION %ld\n", W(offsetof(XLA_FFI_CallFrame, extension_start)));
  printf("_FRAME_STAGE %ld\n", W(offsetof(XLA_FFI_CallFrame, stage)));
  printf("_FRAME_ARGS %ld\n",
         W(offsetof(XLA_FFI_CallFrame, args) + offsetof(XLA_FFI_Args, args)));
  printf("_FRAME_RESULTS %ld\n",
         W(offsetof(XLA_FFI_CallFrame, rets) + offsetof(XLA_FFI_Rets, rets)));
  printf("_BUFFER_DTYPE %ld\n", W(offsetof(XLA_FFI_Buffer, dtype)));
  printf("_BUFFER_DATA %ld\n", W(offsetof(XLA_FFI_Buffer, data)));
  printf("_BUFFER_DIMS %ld\n", W(offsetof(XLA_FFI_Buffer, dims)));
  printf("_BUFFER_WORDS %ld\n", W(sizeof(XLA_FFI_Buffer)));
  printf("_METADATA_VERSION_SIZE %ld\n",
         I(offsetof(XLA_FFI_Metadata, api_version) + offsetof(XLA_FFI_Api_Version, struct_size)));
  printf("_METADATA_MAJOR %ld\n",
         I(offsetof(XLA_FFI_Metadata, api_version) + offsetof(XLA_FFI_Api_Version, major_version)));
  printf("_METADATA_MINOR %ld\n",
         I(offsetof(XLA_FFI_Metadata, api_version) + offsetof(XLA_FFI_Api_Version, minor_version)));
  printf("_METADATA_TRAITS %ld\n", I(offsetof(XLA_FFI_Metadata, traits)));
  printf("_VERSION_BYTES %ld\n", (long)sizeof(XLA_FFI_Api_Version));
  return 0;
}
"""


def test_the_xla_ffi_structures_are_where_the_handler_reads_them(tmp_path):
    """Compiles a C program against jax's own ``c_api.h`` that prints every offset and
    enumeration value ``_xla_cpu``'s handler uses, and compares."""
    import jax
    import jaxlib

    from tandv_tb.stats import _xla_cpu

    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler to read jax's FFI header with")
    source, program = tmp_path / "offsets.c", tmp_path / "offsets"
    source.write_text(_OFFSETS_C)
    subprocess.run(
        [compiler, f"-I{jax.ffi.include_dir()}", str(source), "-o", str(program)],
        check=True,
        capture_output=True,
    )
    printed = subprocess.run([str(program)], check=True, capture_output=True, text=True).stdout
    header = {name: int(value) for name, value in (line.split() for line in printed.splitlines())}
    frame_read = (_xla_cpu._FRAME_EXTENSION, _xla_cpu._FRAME_STAGE, _xla_cpu._FRAME_ARGS)
    last_read = max(*frame_read, _xla_cpu._FRAME_RESULTS)
    assert last_read < _xla_cpu._FRAME_WORDS, "the handler's view of the frame is too short"
    read = {name: getattr(_xla_cpu, name) for name in header}
    changed = {name: (read[name], header[name]) for name in header if read[name] != header[name]}
    assert not changed, (
        f"jaxlib {jaxlib.__version__}'s XLA FFI header (xla/ffi/api/c_api.h) moved what "
        f"tandv_tb.stats._xla_cpu reads (ours, the header's): {changed}"
    )
