"""``track``: numerics of a PyTorch model's training, written as TensorBoard summaries."""

from __future__ import annotations

import os
import warnings
import weakref
from collections.abc import Callable, Sequence

import torch
from torch import nn

from tandv_tb.torch import compiled
from tandv_tb.torch.attaching import Attachments
from tandv_tb.torch.compiled import CompiledTracking
from tandv_tb.torch.distributed import RanksLost
from tandv_tb.torch.graph_capture import GraphCapture
from tandv_tb.torch.hooks import ModuleHooks
from tandv_tb.torch.input_hooks import InputHooks
from tandv_tb.torch.options import TorchOptions
from tandv_tb.torch.parameters import Parameters
from tandv_tb.torch.pipeline_stage import WHOLE_MODEL, Stage, stage_of
from tandv_tb.torch.ranks import Ranks
from tandv_tb.torch.recorder import Recorder
from tandv_tb.torch.skips import UntrackableTensorWarning
from tandv_tb.torch.step_tensors import StepTensors
from tandv_tb.torch.watch import Watch
from tandv_tb.tracking.nonfinite_policy import StepReport
from tandv_tb.tracking.orders import Orders
from tandv_tb.tracking.selection import Patterns
from tandv_tb.tracking.skip_log import SkipLog
from tandv_tb.tracking.step_buffer import StepBuffer
from tandv_tb.tracking.tracker_base import TrackerBase

#: Modules that open trackers hook, with how many trackers hook each.
_HOOKED: weakref.WeakKeyDictionary[nn.Module, int] = weakref.WeakKeyDictionary()


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
        orders = Orders(self._parameters.names())
        self._buffer = StepBuffer(orders)
        self._recorder = Recorder(formats, skips, ranks.layout, ranks.spreads, self._buffer)
        watch = Watch(ranks.layout) if options.watch_nonfinite else None
        self._watch = watch
        self._tensors = StepTensors(self._tracking_now, self._recorder, watch)
        self._compiled = CompiledTracking(
            module, self._tensors, orders, self._recorder, options, self._parameters
        )
        self._hooks = ModuleHooks(module, self._tensors, options, orders, stage)
        self._hooks.receiver_key = self._compiled.key
        self._modules = list(module.modules())
        for hooked in self._modules:
            _HOOKED[hooked] = _HOOKED.get(hooked, 0) + 1
        self._inputs = None
        if options.track_inputs:
            self._inputs = InputHooks(module, self._tensors, options, orders, stage)
            self._inputs.receiver_key = self._compiled.key
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
        if optimizer is not None and (self._track_weights or self._policy.stops_before_update):
            stepping = _stepping_optimizer(optimizer)
            self._optimizer_hook = stepping.register_step_pre_hook(self._on_optimizer_step)
        self._take_tensors()

    def step(self, next_step: int | None = None) -> StepReport:
        """End the current training step: call it once per step, after ``optimizer.step()``.

        On a tracked step this reads the weights and optimizer state, brings the step's
        statistics to the host in one transfer (one collective when distributed), and
        writes one record per tracked tensor. With the watch, any step holding NaN/Inf
        writes its non-finite tensors, and the step after the first of such steps is
        tracked. The next step is numbered ``next_step`` (larger than ``current_step``;
        default ``current_step + 1``), so that a trainer whose step counter jumps keeps the
        tracker's numbers equal to its own.

        Returns the step's ``StepReport`` (whether it saw NaN/Inf, and the first tensor
        that held it), acted on by ``on_nonfinite``. After a ``NonFiniteError`` raised at
        the optimizer's step, that step is already written: ``step()`` returns its report
        and moves on.
        """
        if self._ranks_lost:  # it stopped when a rank was lost: training goes on
            return StepReport(self._step, checked=False)
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
        if self._stopped is not None:
            return self._after_stop(next_step)
        step = self._step
        try:
            if self._active:
                tripped, found = self._finish_tracked()
            else:
                found = self._watched_step() if self._watch is not None else []
                tripped = bool(found)
        except RanksLost as error:  # training goes on as it would without the tracker
            warnings.warn(f"tandv_tb: at step {self._step} {error}", RuntimeWarning, stacklevel=2)
            self._ranks_lost = True
            self._end(keep_pending=False)
            return StepReport(step, checked=False)
        self._gradients_read = False
        self._advance(next_step, tripped)
        self._take_tensors()
        return self._ended(step, found)

    def stop_if_nonfinite(self) -> StepReport | None:
        """Under ``on_nonfinite="raise"``: read the current step's NaN/Inf counts so far (one
        device-to-host read: the watch's counters, or the statistics recorded so far) and,
        where some tensor held NaN/Inf, write the step with the stop, flush and raise
        ``NonFiniteError``; else return the report so far. Nothing (None) under another
        policy, or once the step is stopped.

        The weight gradients the update would use are taken first (once a step), so that
        they are checked too. The optimizer's step calls it before it updates anything (a
        step given a closure, when the closure first returns). A trainer calls it once the
        backward is done, where it acts on the stop in its own way (Lightning's
        ``on_before_optimizer_step``, inside the closure).
        """
        if not self._policy.stops_before_update or self._stopped is not None:
            return None
        if self._ranks_lost or self._closed:
            return None
        self._take_weight_gradients()
        try:
            return self._stop_if_nonfinite()
        except RanksLost as error:
            warnings.warn(f"tandv_tb: at step {self._step} {error}", RuntimeWarning, stacklevel=2)
            self._ranks_lost = True
            self._end(keep_pending=False)
            return None

    def _watched_so_far(self) -> list:
        return self._watch.drain()

    def _after_stop(self, next_step: int) -> StepReport:
        """``step()`` after a ``NonFiniteError``: the stopped step is written already; what
        was taken since is dropped, and the next step is tracked (as after NaN/Inf)."""
        report = self._take_stopped()
        self._buffer.clear()
        if self._watch is not None:
            self._watch.drain()
        self._gradients_read = False
        self._advance(next_step, True)
        self._take_tensors()
        return report

    def _take_tensors(self) -> None:
        """Tell the hooks and ``attach`` whether this step's tensors are taken: a tracked
        step, or any step with the watch (compiled graphs guard on it)."""
        self._recorder.new_step()
        emitting = self._tensors.taking()
        in_graph = emitting and compiled.HOOKS_IN_GRAPH
        self._hooks.emitting = in_graph
        if self._inputs is not None:
            self._inputs.emitting = in_graph
        self._attachments.set_active(emitting)
        self._graph.start_step(self._active)

    @torch.compiler.disable
    def _on_optimizer_step(
        self, optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict
    ) -> tuple[tuple, dict] | None:
        """The optimizer's step pre-hook. Given a closure (Lightning's, LBFGS's), the step
        computes its gradients in it, after this hook: the closure is wrapped so that they
        are taken when its first call returns."""
        wrapped = _closure_wrapped(args, kwargs, self._take_gradients)
        if wrapped is None:
            self._take_gradients()
        return wrapped

    @torch.compiler.disable
    def _take_gradients(self) -> None:
        """Take the weight gradients the optimizer is about to use; under
        ``on_nonfinite="raise"`` stop before it uses them where the step holds NaN/Inf."""
        if self._stopped is not None:  # the trainer stopped this step: nothing to take
            return
        self._take_weight_gradients()
        self.stop_if_nonfinite()

    def _take_weight_gradients(self) -> None:
        """Take the weight gradients there are now, once a step."""
        if self._track_weights and not self._gradients_read:
            gradients = self._parameters.gradients(self._selected)
            self._tensors.take_parameters(self._parameters, gradients)
            self._gradients_read = True

    def _parameter_tensors(self):
        """The parameters' tensors ``step()`` reads: the weight gradients the optimizer
        did not read, the weights and the optimizer's state."""
        if self._track_weights and not self._gradients_read:
            yield from self._parameters.gradients(self._selected)
        yield from self._parameters.weights_and_state(
            self._selected, weights=self._track_weights, optimizer_state=self._track_optimizer
        )

    def _watched_step(self) -> list:
        """End an untracked step with the watch; the NaN/Inf it found."""
        tensors = self._parameter_tensors()  # read right away
        self._tensors.take_parameters(self._parameters, tensors, unchanged=True)
        found = self._ranks.across(self._watch.drain())
        self._write_nonfinite(found, self._policy.stops_before_update)
        return found

    def _record_step_end(self) -> None:
        """Record the weights, gradients and optimizer state the step ends with; note
        what its compiled graphs did."""
        self._parameters.record(self._recorder, self._parameter_tensors())
        self._compiled.check_step(self._step)

    def _detach(self) -> None:
        """Remove every hook. In a combined distributed run a step not ended by ``step()``
        is dropped at ``close`` (ending it would need every rank): nothing more is written
        to the per-rank runs, closed here."""
        self._ranks.close()
        self._hooks.remove()
        self._graph.remove()
        self._compiled.close()
        if self._optimizer_hook is not None:
            self._optimizer_hook.remove()
        for hooked in self._modules:
            if _HOOKED.get(hooked, 0) > 1:
                _HOOKED[hooked] -= 1
            else:
                _HOOKED.pop(hooked, None)
        self._attachments.set_active(False)
        if self._inputs is not None:
            self._inputs.remove()


def _closure_wrapped(
    args: tuple, kwargs: dict, then: Callable[[], None]
) -> tuple[tuple, dict] | None:
    """``optimizer.step``'s arguments (``args[0]`` the optimizer) with its closure, given
    positionally or as ``closure=``, wrapped to call ``then()`` once its first call returns
    (LBFGS calls it again from other weights); its result is returned unchanged. ``None``
    for a step given no closure."""
    keyword = callable(kwargs.get("closure"))
    if not keyword and not (len(args) > 1 and callable(args[1])):
        return None
    closure = kwargs["closure"] if keyword else args[1]
    called = False

    def wrapped(*a, **kw):
        nonlocal called
        result = closure(*a, **kw)
        if not called:
            called = True
            then()
        return result

    if keyword:
        return args, {**kwargs, "closure": wrapped}
    return (args[0], wrapped, *args[2:]), kwargs


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
    on_nonfinite: object = "record",
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
    NaN/Inf in the tensors tracked steps record (read at once on the CPU; on a GPU counted
    there, by one Triton launch per tensor, or by torch operations, and read once at
    ``step()``). At a step where some hold NaN/Inf it writes their names, tensor types
    and NaN, +Inf and -Inf counts in execution order (outputs in forward order, gradients
    in backward order, then weight gradients, weights and optimizer state), and the next
    step is tracked in full whatever ``every`` says (once per stretch of non-finite
    steps). Compiled by a torch older than 2.12, untracked steps check only what
    ``step()`` reads (the graph hands nothing over).

    ``step()`` returns the step's ``tandv_tb.StepReport`` (NaN/Inf seen or not, the first
    tensor that held it). ``on_nonfinite`` says what to do at a step that saw NaN/Inf:
    ``"record"`` (write it down, the default), ``"warn"`` (one ``NonFiniteWarning`` per
    run), ``"raise"`` (``tandv_tb.NonFiniteError`` from ``optimizer.step()``, before it
    updates anything: the step's counts are read then, one device-to-host read a step;
    without ``optimizer`` the error comes from ``step()``), or a callable taking the
    report. It needs the watch.

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
      graph: each tensor reaches the tracker through one operator (``compiled``) and each
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
      ``optimizer``, or where it skipped its step, they are read at ``step()``. A step
      given a closure (``optimizer.step(closure)``, as Lightning and LBFGS call it) reads
      them when the closure first returns.
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
