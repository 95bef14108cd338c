"""``track``: numerics of a PyTorch model's training, written as TensorBoard summaries."""

from __future__ import annotations

import os
import warnings
import weakref
from collections.abc import Sequence

import torch
from torch import nn

from tandv_tb import stats
from tandv_tb.disk.nonfinite_record import entries_from_stats
from tandv_tb.orders import Orders
from tandv_tb.step_buffer import merged
from tandv_tb.torch import graph_op, naming
from tandv_tb.torch.attaching import Attachments
from tandv_tb.torch.distributed import RanksLost
from tandv_tb.torch.graph_capture import GraphCapture
from tandv_tb.torch.hooks import ModuleHooks, _in_backward
from tandv_tb.torch.inputs import InputHooks
from tandv_tb.torch.options import TorchOptions
from tandv_tb.torch.parameters import Parameters
from tandv_tb.torch.pipeline_stage import WHOLE_MODEL, Stage, stage_of
from tandv_tb.torch.ranks import Ranks
from tandv_tb.torch.recorder import Recorder
from tandv_tb.torch.skips import UntrackableTensorWarning
from tandv_tb.torch.watch import Watch
from tandv_tb.tracker_base import TrackerBase
from tandv_tb.tracking import Patterns, SkipLog
from tandv_tb.writer import RecordItem

#: Modules that open trackers hook, with how many trackers hook each.
_HOOKED: weakref.WeakKeyDictionary[nn.Module, int] = weakref.WeakKeyDictionary()


class CompiledBeforeTrackWarning(UserWarning):
    """A model's compiled code was built before ``track`` hooked it (and is rebuilt)."""


def is_tracked(module: nn.Module) -> bool:
    """Whether a tracker not yet closed records ``module``, a module inside it, or a module
    that holds it (for callbacks that must not track a model twice)."""
    return any(m in _HOOKED for m in module.modules())


class Tracker(TrackerBase):
    """Tracks one model's numerics; made by ``track``, which describes the options."""

    def __init__(
        self, module: nn.Module, options: TorchOptions, stage: Stage = WHOLE_MODEL
    ) -> None:
        super().__init__(options)
        self._selected = options.selected
        self._track_weights = options.track_weights
        self._track_optimizer = options.track_optimizer
        formats = options.formats

        self._parameters = Parameters(module, options.optimizer)
        self._ranks = ranks = Ranks(self._parameters, options, stage)
        if ranks.writes:
            self._open_writer(ranks.run)
            ranks.writing_into(self._writer.logdir)
        skips = SkipLog(UntrackableTensorWarning)
        self._recorder = Recorder(formats, skips, ranks.layout)
        watch = Watch(ranks.layout) if options.watch_nonfinite else None
        self._watch = watch
        self._track_activations = options.track_activations
        self._root_label = naming.root_name(module)
        if naming.has_compiled_code(module):  # its compiled code would not see the hooks
            torch.compiler.reset()
            if not graph_op.HOOKS_IN_GRAPH:
                warnings.warn(
                    f"tandv_tb: with torch {torch.__version__} (before 2.13) the compiled "
                    "modules' activations and gradients are not recorded; the weights, "
                    "their gradients and the optimizer state are",
                    RuntimeWarning,
                    stacklevel=3,
                )
        self._ran_compiled = False  # whether a compiled graph handed this tracker a tensor
        self._stale_checked = False
        self._receiver_key = graph_op.register(self._receive)
        active = self._tracking_now
        self._orders = orders = Orders()
        hooks_of = (module, self._recorder, active, options, orders, watch)
        self._hooks = ModuleHooks(*hooks_of, stage)
        self._hooks.receiver_key = self._receiver_key
        self._modules = list(module.modules())
        for hooked in self._modules:
            _HOOKED[hooked] = _HOOKED.get(hooked, 0) + 1
        self._inputs = None
        if options.track_inputs:
            self._inputs = InputHooks(*hooks_of, stage)
            self._inputs.receiver_key = self._receiver_key
        self._graph = GraphCapture(module, options.only_training, stage, enabled=ranks.writes)
        self._attachments = Attachments(
            module,
            self._hooks.record_tensor,
            self._hooks.trace_tensor,
            skips,
            options.only_training,
        )
        self._gradients_read = False  # whether this step's weight gradients were read
        self._ranks_lost = False  # whether a collective failed: the tracker stopped
        optimizer = options.optimizer
        self._optimizer_hook = None
        if optimizer is not None and self._track_weights:
            stepping = _stepping_optimizer(optimizer)
            self._optimizer_hook = stepping.register_step_pre_hook(self._on_optimizer_step)
        self._take_tensors()

    def step(self, next_step: int | None = None) -> None:
        """End the current training step: call it once per step, after ``optimizer.step()``.

        On a tracked step this reads the weights and optimizer state, brings the step's
        statistics to the host in one transfer (one collective when distributed), and
        writes one record per tracked tensor. With the watch, any step holding NaN/Inf
        writes its non-finite tensors, and the step after the first of such steps is
        tracked. The next step is numbered ``next_step`` (larger than ``current_step``;
        default ``current_step + 1``), so that a trainer whose step counter jumps keeps the
        tracker's numbers equal to its own.
        """
        if self._ranks_lost:  # it stopped when a rank was lost: training goes on
            return
        self._check_open()
        if next_step is None:
            next_step = self._step + 1
        elif isinstance(next_step, bool) or not isinstance(next_step, int):
            raise TypeError(f"next_step must be an int, got {next_step!r}")
        elif next_step <= self._step:
            raise ValueError(f"next_step must be > current_step ({self._step}), got {next_step}")
        self._hooks.end_step()
        if self._inputs is not None:
            self._inputs.end_step()
        try:
            if self._active:
                tripped = self._finish_step()
            else:
                tripped = self._watch is not None and self._watched_step()
        except RanksLost as error:  # training goes on as it would without the tracker
            warnings.warn(f"tandv_tb: at step {self._step} {error}", RuntimeWarning, stacklevel=2)
            self._ranks_lost = True
            self._end(keep_pending=False)
            return
        self._gradients_read = False
        self._advance(next_step, tripped)
        self._take_tensors()

    def _take_tensors(self) -> None:
        """Tell the hooks and ``attach`` whether this step's tensors are taken: a tracked
        step, or any step with the watch (compiled graphs guard on it)."""
        emitting = self._active or self._watch is not None
        in_graph = emitting and graph_op.HOOKS_IN_GRAPH
        self._hooks.emitting = in_graph
        if self._inputs is not None:
            self._inputs.emitting = in_graph
        self._attachments.set_active(emitting)
        self._graph.start_step(self._active)

    def _receive(self, name: str, tensor_type: str, module_type: str, tensor: torch.Tensor) -> None:
        """A tensor a compiled graph hands over (``graph_op``), taken as the eager hooks
        take it: recorded on a tracked step, checked by the watch on another.

        Never from the step's memo (``reuse=False``): inductor writes a later value into a
        buffer nothing reads any more, with its own kernels, so the tensor object and its
        version counter stay the same (``out = fc2(h) + bias`` arrives as the tensor of
        ``fc2(h)`` handed over before; tests/trackers/torch/test_torch_compile.py)."""
        self._ran_compiled = True
        try:
            is_input = tensor_type in ("Input", "Input_Gradient")
            order = self._orders.module(("Input", name) if is_input else name)
            if tensor_type in ("Activation", "Input"):
                if _in_backward():  # a checkpointed forward recomputed: taken the first time
                    return
                if tensor_type == "Activation" and not self._track_activations:
                    return  # only placed in the order, for its gradient
            if self._active:
                self._recorder.record(name, tensor_type, module_type, order, tensor, reuse=False)
            elif self._watch is not None:
                self._watch.check(name, tensor_type, tensor, reuse=False)
        except Exception as error:  # tracking never stops training
            self._recorder.skip(name, tensor_type, f"{type(error).__name__}: {error}")

    @torch.compiler.disable
    def _on_optimizer_step(self, optimizer: torch.optim.Optimizer, args, kwargs) -> None:
        """Take the weight gradients the optimizer is about to use."""
        gradients = self._parameters.gradients(self._selected)
        if self._active:
            self._parameters.record(self._recorder, gradients)
        elif self._watch is not None:
            self._watch_parameters(gradients)
        self._gradients_read = True

    def _parameter_tensors(self):
        """The parameters' tensors ``step()`` reads: the weight gradients the optimizer
        did not read, the weights and the optimizer's state."""
        if self._track_weights and not self._gradients_read:
            yield from self._parameters.gradients(self._selected)
        yield from self._parameters.weights_and_state(
            self._selected, weights=self._track_weights, optimizer_state=self._track_optimizer
        )

    def _watch_parameters(self, tensors, unchanged: bool = False) -> None:
        spread = self._ranks.layout.of_parameter
        self._watch.check_all(
            ((p.name, kind, tensor, spread(p.name, tensor)) for p, kind, tensor in tensors),
            unchanged=unchanged,
        )

    def _watched_step(self) -> bool:
        """End an untracked step with the watch; whether it found NaN/Inf."""
        self._watch_parameters(self._parameter_tensors(), unchanged=True)  # read right away
        found = self._ranks.across(self._watch.drain())
        if found and self._writer is not None:
            self._writer.add_nonfinite(self._step, found)
        return bool(found)

    def _finish_step(self) -> bool:
        """End a tracked step; whether the watch found NaN/Inf in it."""
        self._parameters.record(self._recorder, self._parameter_tensors())
        if not self._stale_checked:
            self._stale_checked = True
            self._check_compiled_before_track()
        if self._ran_compiled:
            self._check_root_gradients()
        entries = self._recorder.drain()
        self._graph.end_step(self._writer, self._step, entries)
        parts = merged(entries, stats.fetch([p for e in entries for p in e.parts]))
        results, per_rank = self._ranks.combine(list(zip(entries, parts)))
        found = self._nonfinite(results + [(e, s) for _, e, s in per_rank])
        # Every rank must agree on tracking the next step: the combined sums say it on
        # every rank (NaN/Inf in what rank 0 holds whole alone is written, not followed).
        tripped = self._watch is not None and self._ranks.nonfinite_anywhere(bool(found))
        if self._writer is not None:
            self._writer.add_records(
                self._step,
                (
                    RecordItem(e.name, stats.to_record(), e.tensor_type, e.module_type, e.order)
                    for e, stats in results
                ),
                nonfinite=found,
            )
            self._ranks.write_apart(self._step, per_rank)
        return tripped

    def _check_compiled_before_track(self) -> None:
        """At the first tracked step: where modules whose parameters got gradients handed
        over none of their outputs, their compiled code predates the hooks (dynamo does not
        guard on module hooks). Say so, and drop the compiled code so the next steps record."""
        if not (self._track_activations or self._options.track_gradients):
            return
        root = self._root_label
        recorded = self._recorder.buffer.names_and_types()
        of_modules = {
            name
            for name, tensor_type in recorded
            if tensor_type in ("Activation", "Gradient")
            and name != root
            and not name.startswith((f"{root}.", f"{root}["))  # the root's tuple output
        }
        if of_modules:
            return
        with_gradients = {
            name for name, tensor_type in recorded if tensor_type == "Weight_Gradient"
        }
        with_gradients.update(p.name for p, _, _ in self._parameters.gradients(self._selected))
        owners = {name.rpartition(".")[0] for name in with_gradients}
        if not any(owner and self._selected(owner) for owner in owners):
            return
        warnings.warn(
            f"tandv_tb: the model's compiled code was built before track() hooked it, so step "
            f"{self._step} recorded no activations or gradients of its modules; tandv_tb "
            "called torch.compiler.reset() and the next steps record them (call track() "
            "before the model's first compiled call to spare the recompile)",
            CompiledBeforeTrackWarning,
            stacklevel=3,
        )
        torch.compiler.reset()

    def _check_root_gradients(self) -> None:
        """Say which of the model's own outputs got no gradient in a compiled step that
        ran its backward: a hook outside the compiled graph sees only what flows in from
        after it, not the loss the model computed from the output inside its forward."""
        recorded = set(self._recorder.buffer.names_and_types())
        if not any(tensor_type == "Gradient" for _, tensor_type in recorded):
            return
        root = self._root_label
        for name, tensor_type in recorded:
            of_root = name == root or name.startswith((f"{root}.", f"{root}["))
            if of_root and tensor_type == "Activation" and (name, "Gradient") not in recorded:
                self._recorder.skip(
                    name,
                    "Gradient",
                    "under torch.compile a gradient hook on the model's own output sees the "
                    "gradient flowing in from after the compiled graph, and none did (a loss "
                    "computed from it inside the forward stays in the graph)",
                )

    def _nonfinite(self, results: list) -> list:
        if self._watch is None:
            return []
        return entries_from_stats((e.name, e.tensor_type, s) for e, s in results)

    def _detach(self) -> None:
        """Remove every hook. In a combined distributed run a step not ended by ``step()``
        is dropped at ``close`` (ending it would need every rank): nothing more is written
        to the per-rank runs, closed here."""
        self._ranks.close()
        self._hooks.remove()
        self._graph.remove()
        graph_op.unregister(self._receiver_key)
        if self._optimizer_hook is not None:
            self._optimizer_hook.remove()
        if self._ran_compiled:  # its graphs still call the operator: compile them anew
            torch.compiler.reset()
        for hooked in self._modules:
            if _HOOKED.get(hooked, 0) > 1:
                _HOOKED[hooked] -= 1
            else:
                _HOOKED.pop(hooked, None)
        self._attachments.set_active(False)
        if self._inputs is not None:
            self._inputs.remove()

    def _pending(self) -> bool:
        return not self._ranks.combining and len(self._recorder.buffer) > 0

    def _write_pending(self) -> None:
        self._finish_step()

    def _discard_pending(self) -> None:
        self._recorder.drain()


def _stepping_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The optimizer whose ``step`` runs: a wrapper that never set up an ``Optimizer``'s
    hooks (Accelerate's ``AcceleratedOptimizer``) steps the one it holds (``.optimizer``)."""
    inner = getattr(optimizer, "optimizer", None)
    if not hasattr(optimizer, "_optimizer_step_pre_hooks") and isinstance(
        inner, torch.optim.Optimizer
    ):
        return _stepping_optimizer(inner)
    return optimizer


def track(
    module: nn.Module,
    *,
    logdir: str | os.PathLike | None = None,
    writer: object = None,
    optimizer: torch.optim.Optimizer | None = None,
    every: int = 1,
    include: Patterns = None,
    exclude: Patterns = None,
    track_activations: bool = True,
    track_gradients: bool = True,
    track_weights: bool = True,
    track_optimizer: bool = True,
    track_inputs: bool = False,
    formats: Sequence[str] = (),
    only_training: bool = True,
    init_step: int = 0,
    per_rank: bool = False,
    process_group: object = None,
    layouts: object = None,
    mesh: object = None,
    watch_nonfinite: bool = True,
) -> Tracker:
    """Track the numerics of ``module``'s training into TensorBoard event files.

    Use it like a ``SummaryWriter``, as a context manager around the training loop, and
    call ``tracker.step()`` once per step after ``optimizer.step()``::

        with track(model, logdir="runs/exp1", optimizer=opt, every=10) as tracker:
            for batch in loader:
                loss = loss_fn(model(batch)); opt.zero_grad(); loss.backward(); opt.step()
                tracker.step()

    Recorded per tracked step (steps ``init_step`` + 0, ``every``, ``2 * every``, ... by
    their number): ``Activation`` (every module's output, each tensor of a tuple/list/dict
    output), ``Gradient`` (the loss's gradient w.r.t. those outputs), ``Weight`` and
    ``Weight_Gradient`` of every parameter and ``Optimiser_State.<key>`` of every tensor in
    the optimizer's state, read at ``step()``. With ``track_inputs=True`` also ``Input``
    (every tensor given to a module, positional or keyword, named as outputs are; float
    tensors only) and ``Input_Gradient`` (the loss's gradient w.r.t. such a tensor, over
    all its uses). ``tandv_tb.torch.attach`` inside a forward adds any tensor.
    ``include``/``exclude`` are regular expressions searched in every name; ``formats`` are
    the low-precision formats whose under/overflow is counted exactly; ``only_training``
    skips modules in eval mode. ``writer`` is a user's ``SummaryWriter`` (torch or
    tensorboardX) to write into instead of ``logdir``.

    The non-finite watch (``watch_nonfinite=True``) checks every step, tracked or not, for
    NaN/Inf in the tensors tracked steps record (one ``sum`` per CPU tensor; on another
    device, counts, or sums for what ``step()`` reads, kept there and read once at
    ``step()``). At a step where some hold NaN/Inf it writes their names, tensor types
    and NaN, +Inf and -Inf counts in execution order (outputs in forward order, gradients
    in backward order, then weight gradients, weights and optimizer state), and the next
    step is tracked in full whatever ``every`` says (once per stretch of non-finite
    steps). Compiled by a torch older than 2.13, untracked steps check only what
    ``step()`` reads (the graph hands nothing over).

    Distributed (``torch.distributed`` initialised, more than one rank; every rank calls
    ``track`` and ``step()``): each tensor's statistics are combined across ranks in one
    collective per tracked step, counting each logical tensor once over its whole extent:
    batches and shards merge, replicas count once (``tandv_tb.torch.parallel_layout``);
    rank 0 writes. ``module`` may be a ``PipelineStage`` (``torch.distributed.pipelining``).
    In a model computing with DTensors, a plain tensor nothing tells the layout of is
    recorded per rank (``<run>/rank<k>``) with a warning naming it; ``layouts`` (regular
    expressions of names to ``Shard``/``Replicate`` placements) over ``mesh`` (the
    ``DeviceMesh`` they refer to) tell it. ``per_rank=True``: every rank writes its own
    run ``<logdir>/rank<k>``. ``process_group``: the ranks to combine over (all).

    Notes:

    - Names are module/parameter paths without wrappers (DDP's ``module.``, FSDP's,
      ``torch.compile``'s ``_orig_mod.``); the root module's output is named by its class
      (``GPT``). Where a tuple output's ``name.1`` is also a child module's name (a
      ``Sequential`` ending in an LSTM), that output's extra tensors are ``name[1]``, ...
    - Under ``torch.compile`` (``torch.compile(model)`` or ``model.compile()``, before or
      after ``track``; ``fullgraph=True`` too) the hooks are traced into the compiled
      graph: each tensor reaches the tracker through one operator (``graph_op``) and each
      gradient through the compiled backward, with no graph break. Tracked and untracked
      steps run one graph while the watch is on (two without it, each compiled once).
      Records are those of eager mode, but for a gradient that stays inside the graph: a
      model that computes its loss from its own output inside its forward passes on no
      gradient for that output (one warning says so; its last layer's ``Gradient`` holds
      it). A model compiled before ``track`` has its compiled code dropped
      (``torch.compiler.reset()``, since dynamo does not guard on hooks), at ``track`` when
      the model passed is compiled, else at the first tracked step, with a
      ``CompiledBeforeTrackWarning``; ``close`` drops the code its hooks were traced into.
    - Weight gradients are read when the optimizer steps (before its update, unscaled under
      ``GradScaler``), so ``tracker.step()`` may follow ``zero_grad()``; without an
      ``optimizer``, or where it skipped its step, they are read at ``step()``.
    - With activation checkpointing, the recomputed forward is not recorded again.
    - A model's modules are the ones it holds when ``track`` is called.
    - The options are checked once, as a ``tandv_tb.torch.options.TorchOptions``: a bad
      value raises a ``ValueError`` or ``TypeError`` naming its keyword before anything is
      hooked or written.
    """
    options = dict(locals())
    module, stage = stage_of(options.pop("module"))
    if not isinstance(module, nn.Module):
        raise TypeError(f"track needs a torch.nn.Module, got {type(module).__name__}")
    return Tracker(module, TorchOptions(**options), stage)
