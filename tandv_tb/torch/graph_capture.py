"""The model's graph, recorded by the PyTorch tracker (``GraphCapture``): when, from which
forward pass, and how a compiled model's is recorded.

- When: at the first tracked step, and again at the next tracked step after one whose
  module calls differ from those of the step it was recorded at (the module outputs
  recorded and how many tensors each: a module called more or fewer times, a branch taken
  or left). Sizes alone (a smaller last batch) record nothing again. The writer skips a
  graph equal to the last it wrote.
- From which forward: the model's first call in that step (the later ones of gradient
  accumulation are the same graph); where the model itself is not called, every call of
  its modules at the top in that step. Calls in eval mode are left out with
  ``only_training``, like their numerics. ``Recording`` (``graph_recording``) builds it
  from a forward pre-hook and a forward hook on every module, put on at ``track`` and
  doing nothing on other steps: they stay on, as dynamo compiles the hooks a module has
  and taking them off would compile the model again.
- Compiled models: the hooks are traced by dynamo, not run, so the graph comes from one
  eager replay of the compiled call (``graph_replay``), run where eager code sees that call:
  a forward hook on the ``torch.compile(model)`` given to ``track``, around a
  ``model.compile()``d model's call, or at the end of an eager model's call whose modules
  are partly compiled. A ``torch.compile(model)`` that ``track`` was not given runs its
  model wholly in compiled code: no graph (a warning says to give it to ``track``). A
  compiled part called by eager code outside the model's calls (a compiled submodule
  called from a Lightning ``training_step``) is replayed alone after its call
  (``replay_into``). In a distributed run no replay is done (it could run collectives on
  one rank alone).
- Only the writing rank records (``enabled``), and recording never stops training: an
  error is caught, said once (``GraphCaptureWarning``), and no graph is recorded.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from tandv_tb.event_files.graph_record import ModelGraph
from tandv_tb.event_files.metadata import MODULE_CALL_TYPES
from tandv_tb.torch import naming
from tandv_tb.torch.compiled import is_compiled
from tandv_tb.torch.distributed import is_distributed
from tandv_tb.torch.graph_recording import Recording
from tandv_tb.torch.graph_replay import replay, replay_into
from tandv_tb.torch.pipeline_stage import WHOLE_MODEL, Stage
from tandv_tb.torch.step_tensors import recomputing
from tandv_tb.tracking.graph_builder import warn_capture
from tandv_tb.tracking.step_buffer import Entry


def module_calls(entries: Sequence[Entry]) -> tuple:
    """What a tracked step recorded of its module calls: each module-side tensor's name,
    type and number of parts (one per tensor recorded), in order."""
    return tuple(
        (e.name, e.tensor_type, len(e.parts)) for e in entries if e.tensor_type in MODULE_CALL_TYPES
    )


class GraphCapture:
    """Records one model's graph for its tracker (see the module's doc)."""

    def __init__(
        self,
        module: nn.Module,
        only_training: bool,
        stage: Stage = WHOLE_MODEL,
        enabled: bool = True,
    ) -> None:
        self._root = naming.unwrap(module)
        label = naming.root_name(module)
        named = [(path or label, m) for path, m in naming.named_modules(module)]
        self._layers: Mapping[int, str] = {id(m): layer for layer, m in named}
        self._modules = [m for _, m in named]  # keeps the ids valid
        self._only_training = only_training
        self._stage = stage
        self._recording: Recording | None = None
        self._graph: ModelGraph | None = None  # replayed this step
        self._replay_args: tuple | None = None  # of an eager model call with compiled parts
        self._wanted = enabled
        self._calls: tuple | None = None  # module_calls of the step the graph is from
        self._said: set[str] = set()
        self._handles: list = []
        if not enabled:
            return
        for m in self._modules:
            self._handles.append(m.register_forward_pre_hook(self._on_begin, with_kwargs=True))
            self._handles.append(m.register_forward_hook(self._on_end, with_kwargs=True))
        outer = naming.wrappers(module)
        for wrapper in module.modules():
            if "_orig_mod" in wrapper._modules:  # torch.compile(m): its calls are compiled
                after = self._after_compiled_call if wrapper in outer else self._after_part
                self._handles.append(wrapper.register_forward_hook(after, with_kwargs=True))

    # -- the tracker's steps -------------------------------------------------------------
    def start_step(self, tracked: bool) -> None:
        """A step begins: it records the graph if it is tracked and the graph is wanted."""
        self._unwrap_compiled_call()
        self._recording = None
        self._graph = self._replay_args = None
        if not (tracked and self._wanted):
            return
        self._recording = Recording(self._layers, self._root)
        compiled = self._root.__dict__.get("_compiled_call_impl")
        if compiled is not None:  # model.compile(): its call is compiled, hooks and all
            self._root._compiled_call_impl = functools.partial(self._through_compiled, compiled)

    def end_step(self, entries: Sequence[Entry]) -> ModelGraph | None:
        """A tracked step ends: the graph it recorded, to be written (``entries``: what
        the step recorded); note a change of its calls."""
        recording, graph = self._recording, self._graph
        self._recording, self._graph = None, None
        self._unwrap_compiled_call()
        calls = module_calls(entries)
        if recording is None:
            self._wanted |= self._calls is not None and calls != self._calls
            return None
        try:
            graph = graph if graph is not None else recording.graph()
            if graph is None:
                if calls and not recording.started:
                    self._say(
                        "unseen",
                        "the model's graph is not recorded: its module calls ran only inside "
                        "compiled code, where hooks do not run (a torch.compile(model) that "
                        "track() was not given, or a compiled training_step); give track() "
                        "the compiled module, or compile the modules the step calls",
                    )
                return None
        except Exception as error:  # recording the graph never stops training
            self._fail(error)
            return None
        self._wanted, self._calls = False, calls
        return graph

    def remove(self) -> None:
        self._unwrap_compiled_call()
        self._recording = None
        for handle in self._handles:
            handle.remove()
        self._handles = []

    # -- hooks ---------------------------------------------------------------------------
    def _taking(self) -> Recording | None:
        """The recording eager calls go to now (None: none, or not these calls)."""
        recording = self._recording
        if recording is None or recording.finished or recomputing():
            return None
        if self._stage is not WHOLE_MODEL and self._stage.inferring():
            return None
        return recording

    def _on_begin(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        if torch.compiler.is_compiling():  # first: a traced hook reads no state (no guard)
            return
        recording = self._taking()
        if recording is None:
            return
        try:
            take = True
            if recording.at_top:
                if self._only_training and not module.training:
                    take = False
                elif module is self._root and is_compiled(module):
                    self._replay_args, take = (args, kwargs), False  # replayed at its end
            recording.begin(module, args, kwargs, take)
        except Exception as error:
            self._fail(error)

    def _on_end(self, module: nn.Module, args: tuple, kwargs: dict, output: object) -> None:
        if torch.compiler.is_compiling():
            return
        recording = self._taking()
        if recording is None:
            return
        try:
            recording.end(module, output)
            if self._replay_args is not None and recording.at_top:
                (args, kwargs), self._replay_args = self._replay_args, None
                self._replay(args, kwargs)
            elif recording.finished:  # built now: the autograd nodes it holds are let go
                self._graph = recording.graph()
        except Exception as error:
            self._fail(error)

    def _after_compiled_call(
        self, wrapper: nn.Module, args: tuple, kwargs: dict, output: object
    ) -> None:
        """After a call of the ``torch.compile(model)`` given to ``track`` (eager code)."""
        self._compiled_call_ended(args, kwargs)

    def _after_part(self, wrapper: nn.Module, args: tuple, kwargs: dict, output: object) -> None:
        """After a call of a compiled part of the model (``torch.compile(child)``): where
        eager code made it outside the model's calls, it is replayed into the recording
        (inside the model's call, the model's own replay at its end records it)."""
        if torch.compiler.is_compiling():
            return
        recording = self._after_top_call(wrapper)
        if recording is None:
            return
        try:
            if self._replayable():
                replay_into(recording, wrapper, self._layers, (args, kwargs, output))
        except Exception as error:
            self._fail(error)

    def _through_compiled(self, compiled, *args, **kwargs) -> object:
        """A ``model.compile()``d model's call, while the step records the graph."""
        output = compiled(*args, **kwargs)
        if not torch.compiler.is_compiling():
            self._compiled_call_ended(args, kwargs)
        return output

    def _compiled_call_ended(self, args: tuple, kwargs: Mapping) -> None:
        if self._after_top_call(self._root) is None:
            return
        try:
            self._replay(args, kwargs)
        except Exception as error:
            self._fail(error)

    def _after_top_call(self, module: nn.Module) -> Recording | None:
        """The recording that a compiled call of ``module``, just ended, is replayed into:
        None where none is taking calls, where the call ran inside a call of the model, or
        where it ran in eval mode and only training counts."""
        recording = self._taking()
        if recording is None or not recording.at_top:
            return None
        if self._only_training and not module.training:
            return None
        return recording

    def _replay(self, args: tuple, kwargs: Mapping) -> None:
        recording = self._recording
        if recording is None or recording.started:
            return
        recording.finish()
        if self._replayable():
            self._graph = replay(self._root, self._layers, args, kwargs)

    def _replayable(self) -> bool:
        """Whether compiled calls may be replayed eagerly (not in a distributed run)."""
        if not is_distributed():
            return True
        self._say(
            "distributed",
            "the graph of a compiled model is not recorded in a distributed run (its "
            "eager replay could run collectives on one rank alone)",
        )
        return False

    def _unwrap_compiled_call(self) -> None:
        impl = self._root.__dict__.get("_compiled_call_impl")
        if isinstance(impl, functools.partial) and impl.func == self._through_compiled:
            self._root._compiled_call_impl = impl.args[0]

    def _fail(self, error: Exception) -> None:
        """Stop recording the graph for this run, and say why."""
        self._recording, self._wanted = None, False
        self._say("failed", f"the model's graph is not recorded ({type(error).__name__}: {error})")

    def _say(self, key: str, message: str) -> None:
        if key not in self._said:
            self._said.add(key)
            warn_capture(message, stacklevel=4)
