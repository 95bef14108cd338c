"""``track``: numerics of JAX/Flax training, also under ``jax.jit``, as TensorBoard summaries."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import jax

from tandv_tb.event_files.metadata import OPTIMISER_STATE_PREFIX
from tandv_tb.jax import array_stats, nnx_modules, trees
from tandv_tb.jax.collector import Collector, Config
from tandv_tb.jax.compiled import TrackedFunction, UnsupportedJit, unwrap
from tandv_tb.jax.graph_capture import FunctionGraph
from tandv_tb.jax.interception import refuse_traced, run_intercepted
from tandv_tb.jax.leaf_plan import LeafPlans
from tandv_tb.jax.skips import UntrackableArrayWarning, Verdict, untrackable
from tandv_tb.jax.watch import WatchCollector, WatchResults, output_counts
from tandv_tb.tracking.nonfinite_policy import StepReport
from tandv_tb.tracking.options import TrackOptions
from tandv_tb.tracking.selection import Patterns
from tandv_tb.tracking.skip_log import SkipLog
from tandv_tb.tracking.tracker_base import TrackerBase

_GIVEN = object()  # a pytree was given to track()


def _kept(state: object) -> object:
    """What the tracker keeps of a state given to ``track``."""
    if state is None or nnx_modules.is_nnx_object(state):
        return state
    return _GIVEN


class Tracker(TrackerBase):
    """Tracks one JAX/Flax training run; made by ``track``, which describes the options."""

    def __init__(self, model_state: object, optimizer_state: object, options: TrackOptions):
        super().__init__(options)
        self._config = Config(
            options.formats,
            options.selected,
            bool(options.track_gradients),
            SkipLog(UntrackableArrayWarning),
            inputs=bool(options.track_inputs),
        )
        if jax.process_index() == 0:  # under jax.distributed, process 0 alone writes
            self._open_writer()
        # NNX objects are read again at each step; of a pytree only the fact that one was
        # given is kept (holding it would keep a copy of the model alive).
        self._model_state = _kept(model_state)
        self._optimizer_state = _kept(optimizer_state)
        self._module_types: dict[str, str] = nnx_modules.module_types(model_state)
        self._leaf_plans = LeafPlans(self._choose)
        self._functions: dict[tuple[str, int, bool], tuple[Callable, dict, TrackedFunction]] = {}
        self._watch = WatchResults() if options.watch_nonfinite else None
        self._graph = FunctionGraph()

    def intercept(self, fn: Callable, *args, **kwargs):
        """``fn(*args, **kwargs)``, recording the output of every Flax module called in it
        (``Activation``) and, where it is differentiated, the gradient w.r.t. that output
        (``Gradient``). ``fn`` may be ``jax.jit``- or ``nnx.jit``-compiled: on tracked
        steps a version of it that also returns the statistics is compiled once and run
        in its place; on other steps ``fn`` itself runs.

        Under ``on_nonfinite="raise"`` the NaN/Inf counts of the call's module outputs and
        their cotangents are read when it returns (one transfer), and where one held
        NaN/Inf the step is written with the stop and ``NonFiniteError`` raised: the new
        state the call computed is never handed back."""
        self._check_open()
        if not callable(fn):
            raise TypeError(f"intercept needs a function, got {type(fn).__name__}")
        refuse_traced(args, kwargs)
        outputs = self._intercepted(fn, args, kwargs)
        if self._policy.stops_before_update and self._stopped is None:
            self._stop_if_nonfinite()  # raises NonFiniteError where it finds NaN/Inf
        return outputs

    def _intercepted(self, fn: Callable, args: tuple, kwargs: dict):
        """``fn(*args, **kwargs)``, recorded as ``intercept`` says."""
        if not self._active and self._watch is None:
            return fn(*args, **kwargs)
        # On untracked steps the watch's variant only counts NaN/Inf in the same arrays.
        watch = not self._active
        compiled = self._tracked(fn, watch=watch)
        if compiled is fn:
            return fn(*args, **kwargs)
        if compiled is not None:
            outputs, packed, output_counts = compiled(*args, **kwargs)
            if watch:
                self._watch.add_packed(packed, outputs, output_counts)
            else:
                self._buffer.add_packed(packed)
            return outputs
        collector = self._new_collector(watch, fn)
        outputs = run_intercepted(collector, fn, args, kwargs)
        if watch:
            self._watch.add(collector.entries)
            return outputs
        self._learn(collector)
        for name, tensor_type, module_type, pending in collector.entries:
            self._buffer.add(name, tensor_type, module_type, pending)
        return outputs

    def _new_collector(self, watch: bool, function: object) -> Collector | WatchCollector:
        """The collector of a pass of ``function``; on a tracked one, with the graph's
        recording where the graph is wanted (``graph_capture``)."""
        if watch:
            return WatchCollector(self._config)
        collector = Collector(self._config)
        collector.graph = self._graph.recording_for(function)
        return collector

    def _learn(self, collector: Collector) -> None:
        for name, module_type in collector.module_types.items():
            self._module_types.setdefault(name, module_type)
        if collector.graph is not None:
            self._graph.recorded(collector.graph)

    def _tracked(self, fn: Callable, watch: bool = False) -> TrackedFunction | Callable | None:
        """The tracked version of a jitted ``fn`` (with ``watch``, the watch's version), made
        once per Python function and jit options (a new ``jax.jit(f)`` of the same ``f``
        reuses it); None for a function that is not jitted; ``fn`` itself for one whose jit
        options cannot be reproduced."""
        try:
            unwrapped = unwrap(fn)
        except UnsupportedJit as error:
            name = getattr(fn, "__name__", type(fn).__name__)
            self._config.skips.skip(name, "Activation", f"{error} is not supported")
            return fn
        if unwrapped is None:
            return None
        key = (unwrapped.flavour, id(unwrapped.fun), watch)
        known = self._functions.get(key)
        if known is not None and known[0] is unwrapped.fun and known[1] == unwrapped.options:
            return known[2]
        # The watch's jax.jit variant also counts what it returns, for step() (NNX's
        # outputs are not the arrays the function returned).
        count_outputs = output_counts if watch and unwrapped.flavour == "jax" else None
        tracked = TrackedFunction(
            unwrapped, lambda: self._new_collector(watch, unwrapped.fun), self._learn, count_outputs
        )
        self._functions[key] = (unwrapped.fun, unwrapped.options, tracked)
        return tracked

    def step(
        self, model_state: object = None, optimizer_state: object = None, grads=None
    ) -> StepReport:
        """End the current training step: call it once per step, after the update.

        On a tracked step this records every float array of ``model_state`` (``Weight``),
        of ``grads`` (``Weight_Gradient``, unless ``track_gradients=False``) and of
        ``optimizer_state`` (``Optimiser_State.<key>``), brings the step's statistics to the
        host in one transfer and writes one record per tracked tensor. NNX modules and
        optimizers given to ``track`` are read again when they are not given here.

        Returns the step's ``StepReport``, acted on by ``on_nonfinite``. After a
        ``NonFiniteError`` raised by ``intercept``, that step is already written:
        ``step()`` returns its report and moves on.
        """
        self._check_open()
        step = self._step
        if self._stopped is not None:
            report = self._take_stopped()
            self._buffer.clear()  # what was taken since the stop
            if self._watch is not None:
                self._watch = WatchResults()
            self._advance(step + 1, True)
            return report
        if self._active:
            self._record_trees(model_state, optimizer_state, grads)
            _, found = self._finish_tracked()
        elif self._watch is not None:
            found = self._watched_step(model_state, optimizer_state, grads)
        else:
            found = []
        self._advance(step + 1, bool(found))
        return self._ended(step, found)

    def _watched_so_far(self) -> list:
        return self._watch.drain(keep_outputs=True)

    def _watched_step(self, model_state: object, optimizer_state: object, grads: object) -> list:
        """End an untracked step with the watch; the NaN/Inf it found."""
        try:
            leaves = self._chosen(model_state, optimizer_state, grads)
        except ValueError:  # step() without the pytrees given to track(): nothing to read
            leaves = []
        self._watch.add_arrays([(leaf.name, leaf.tensor_type, leaf.value) for leaf in leaves])
        found = self._watch.drain()
        self._write_nonfinite(found, self._policy.stops_before_update)
        return found

    def _current(self, given: object, at_track: object, what: str) -> object:
        if given is not None:
            return given
        if at_track is _GIVEN:
            raise ValueError(
                f"track() was given {what}, so step() needs the current {what} (the one after "
                "this step's update): tracker.step(model_state, optimizer_state, grads)"
            )
        return at_track

    def _record_trees(self, model_state: object, optimizer_state: object, grads: object) -> None:
        chosen = self._chosen(model_state, optimizer_state, grads)
        started = array_stats.start([leaf.value for leaf in chosen], self._config.formats)
        for leaf, pending in zip(chosen, started):
            module_type = self._module_types.get(leaf.name.rpartition(".")[0], "")
            self._buffer.add(leaf.name, leaf.tensor_type, module_type, pending)

    def _chosen(self, model_state: object, optimizer_state: object, grads: object) -> list:
        """The tracked arrays of the pytrees given to ``step()``, named."""
        model_state = self._current(model_state, self._model_state, "model_state")
        optimizer_state = self._current(optimizer_state, self._optimizer_state, "optimizer_state")
        if optimizer_state is None and _is_train_state(model_state):
            model_state, optimizer_state = model_state.params, model_state.opt_state
        self._module_types.update(
            (k, v)
            for k, v in nnx_modules.module_types(model_state).items()
            if k not in self._module_types
        )
        model = nnx_modules.state_tree(model_state)
        with_grads = grads is not None and self._config.gradients
        return self._leaf_plans.chosen(
            model,
            nnx_modules.state_tree(grads) if with_grads else None,
            None if optimizer_state is None else nnx_modules.state_tree(optimizer_state, True),
        )

    def _choose(self, model: object, grads: object, optimizer: object) -> list:
        """The tracked leaves of a step's pytrees (``leaf_plan``: once per layout), named,
        with their places among the pytrees' leaves."""
        leaves = trees.weight_leaves(model, "Weight")
        if grads is not None:
            leaves += trees.weight_leaves(grads, "Weight_Gradient")
        if optimizer is not None:
            leaves += trees.optimizer_leaves(optimizer, {leaf.name for leaf in leaves})
        chosen = []
        for i, leaf in enumerate(leaves):
            if not self._config.selected(leaf.name):
                continue
            optimizer_state = leaf.tensor_type.startswith(OPTIMISER_STATE_PREFIX)
            verdict = untrackable(leaf.value, skip_scalars=optimizer_state)
            if verdict is Verdict.TRACK:
                chosen.append((i, leaf))
            elif verdict is not Verdict.SILENT:
                self._config.skips.skip(leaf.name, leaf.tensor_type, verdict)
        return chosen


def _is_train_state(state: object) -> bool:
    """Whether ``state`` is a ``flax.training.train_state.TrainState`` (or alike)."""
    return all(hasattr(state, a) for a in ("params", "opt_state", "apply_fn", "tx"))


def track(
    model_state: object = None,
    optimizer_state: object = None,
    *,
    logdir: str | os.PathLike | None = None,
    every: int = 1,
    include: Patterns = None,
    exclude: Patterns = None,
    track_gradients: bool = True,
    track_inputs: bool = False,
    formats: Sequence[str] = (),
    writer: object = None,
    init_step: int = 0,
    watch_nonfinite: bool = True,
    on_nonfinite: object = "record",
) -> Tracker:
    """Track the numerics of JAX/Flax training into TensorBoard event files.

    ::

        with track(model_state=params, optimizer_state=opt_state, logdir="runs/jax1",
                   every=10) as tracker:
            for batch in data:
                params, opt_state, grads = tracker.intercept(update, params, opt_state, batch)
                tracker.step(params, opt_state, grads)

    ``update`` may be ``jax.jit``-ed (or ``nnx.jit``-ed): statistics are then computed in
    the compiled program and only they leave it. Recorded per tracked step (steps
    ``init_step`` + 0, ``every``, ``2 * every``, ... by number): ``Activation`` (the output
    of every Flax module called in ``intercept``, each array of a tuple/dict output),
    ``Gradient`` (the cotangent of those outputs), ``Weight``, ``Weight_Gradient`` and
    ``Optimiser_State.<key>`` of every float array of the pytrees given to ``step`` (or
    NNX modules and optimizers given here; a Flax ``TrainState`` as ``model_state`` gives
    both its ``params`` and its ``opt_state``). ``include``/``exclude`` are regular expressions
    searched in names; ``formats`` are the low-precision formats whose under/overflow is
    counted exactly; ``track_gradients=False`` skips every kind of gradient. With
    ``track_inputs=True`` also ``Input`` (every array given to a module call, positional or
    keyword, named as outputs are; float arrays only) and ``Input_Gradient`` (its cotangent
    through that call: JAX arrays have no identity, so unlike PyTorch's this covers the
    module's own use of the array, which is ``jax.grad`` of the loss w.r.t. it when the
    module is its only user). ``tandv_tb.jax.attach`` adds any array. ``writer`` is a
    user's ``SummaryWriter`` (torch or tensorboardX) to write into instead of ``logdir``.

    The non-finite watch (``watch_nonfinite=True``) counts NaN/Inf in the same arrays on
    every step, tracked or not: on untracked steps a jitted ``update`` runs as a second
    variant of it (compiled once) that also returns those counts, and ``step()`` reads them
    in one transfer. At a step where some array holds NaN/Inf their names, tensor types and
    NaN, +Inf and -Inf counts are written in execution order (outputs in forward order,
    cotangents in backward order, then weight gradients, weights and optimizer state), and
    the next step is tracked in full whatever ``every`` says (once per stretch of
    non-finite steps).

    ``step()`` returns the step's ``tandv_tb.StepReport``; ``on_nonfinite`` acts on a step
    that saw NaN/Inf: ``"record"`` (the default), ``"warn"`` (once per run), ``"raise"``
    (``tandv_tb.NonFiniteError`` from ``intercept``, before the new state it computed is
    handed back: its counts are read when the call returns, one transfer a call), or a
    callable taking the report. It needs the watch.

    Under ``jax.distributed`` every process calls ``track``, ``intercept`` and ``step`` alike
    (the statistics of a global array are computed by a program all processes run, so they
    describe the whole array); process 0 alone writes.

    The options are checked once, as a ``tandv_tb.tracking.options.TrackOptions`` (the options
    PyTorch's ``track`` shares): a bad value raises a ``ValueError`` or ``TypeError`` naming
    its keyword before anything is written.
    """
    options = dict(locals())
    model_state, optimizer_state = options.pop("model_state"), options.pop("optimizer_state")
    return Tracker(model_state, optimizer_state, TrackOptions(**options))
