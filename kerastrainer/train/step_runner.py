"""Step runners: what the fit loop calls to run ``k`` training steps. One interface,
:class:`StepRunner`, and its implementations for the standard trainers:

- :class:`FunctionStepRunner`: the ``tf.function`` of ``train_function.py`` (``k`` steps in one
  call, the input dequeued in-graph); it owns the function's first call (trace, the XLA checks,
  compile) and rebuilds the function when the XLA policy turns XLA off;
- :class:`NoOpStepRunner`: steps that compute nothing (``NoOpTrainer``).

The TF1-graph runners of custom trainers are in ``tf1_graph_runner.py``. Runners leave to the
fit loop (``loop.py``) the counters, callbacks, stop signals and the input's life, and report
each call as a :class:`~.step_result.StepResult`.

Example (what the fit loop does)::

    result = trainer.step_runner.run(k)      # StepResult: steps, scalars, histograms, non-finite steps
"""
from __future__ import annotations

import abc
import dataclasses
import functools
import time
from typing import List, Optional, Sequence

import tensorflow as tf

from ..tfutils.tower_func import scalar_cost_error
from ..utils.devices import device_type
from .step_result import StepResult
from .train_function import StepSpec, build_train_function
from .xla import XlaPolicy, replica_devices, xla_error_ops, xla_unsupported_ops

__all__ = ["StepRunner", "FunctionStepRunner", "NoOpStepRunner", "steps_tensor"]


@functools.lru_cache(maxsize=None)
def steps_tensor(k: int) -> tf.Tensor:
    """``k`` as the one int32 tensor a train function is called with (a Python int would retrace it)."""
    with tf.init_scope():   # an eager tensor, whatever context asks first
        return tf.constant(k, tf.int32)


class StepRunner(abc.ABC):
    """Runs training steps for the fit loop.

    Attributes:
        fixed_steps_per_call: None when a call may run any number of steps; 1 when every call
            runs one step (a custom ``run_step``, the no-op trainer).
    """

    fixed_steps_per_call: Optional[int] = None

    @abc.abstractmethod
    def run(self, k: int) -> StepResult:
        """Run ``k`` steps (TensorFlow's errors propagate: the loop maps a closed input's)."""

    @property
    def traced(self) -> bool:
        """Whether the step was traced already (a callback that edits the step must come first)."""
        return False

    def disable_xla(self, reason: str) -> None:
        """Run without XLA from now on (before the first call); no-op where XLA is not used."""

    def add_fetches(self, names: Sequence[str]) -> bool:
        """Report the tower's scalar tensors ``names`` after each call (their mean over the call's
        steps, as the step output ``'_fetch:<name>'``); False where this runner cannot."""
        return False


class NoOpStepRunner(StepRunner):
    """Steps that compute nothing: the global step variable advances (tensorpack's ``NoOpTrainer``)."""

    fixed_steps_per_call = 1

    def __init__(self, global_step: tf.Variable):
        self._global_step = global_step

    def run(self, k: int) -> StepResult:
        self._global_step.assign_add(k)
        return StepResult(steps=k, global_steps=k, scalars={}, timed=False)


class FunctionStepRunner(StepRunner):
    """The standard step: ``k`` steps of every replica in one ``tf.function`` call.

    Args:
        spec: what the function is built from (its ``xla_region`` is taken from ``xla``).
        xla: the run's XLA policy (resolved, its region chosen).

    Attributes:
        function: the current ``tf.function`` (rebuilt if XLA is turned off).
        trace_seconds, first_call_seconds: the first call: tracing, then running (XLA compile included).
    """

    def __init__(self, spec: StepSpec, xla: XlaPolicy):
        self.spec = spec
        self.xla = xla
        self.calls = 0
        self.trace_seconds: Optional[float] = None
        self.first_call_seconds: Optional[float] = None
        self._build()

    def _build(self) -> None:
        self.function, self.stats = build_train_function(dataclasses.replace(self.spec, xla_region=self.xla.region))

    @property
    def traced(self) -> bool:
        return self.function.experimental_get_tracing_count() > 0

    def disable_xla(self, reason: str) -> None:
        if self.xla.disable(reason):
            self._build()

    def add_fetches(self, names: Sequence[str]) -> bool:
        known = set(self.stats.names)   # the cost and the moving summaries are reported already
        names = tuple(dict.fromkeys(tuple(self.spec.fetch_names) + tuple(n for n in names if n not in known)))
        if names == tuple(self.spec.fetch_names):
            return True
        if self.traced:
            raise RuntimeError(f"Tower tensors {list(names)} are asked for after the train step was traced: "
                               "ask in a callback's setup_graph.")
        self.spec = dataclasses.replace(self.spec, fetch_names=names)
        self._build()
        return True

    def run(self, k: int) -> StepResult:
        source = self.spec.source
        feeds = source.next_feed() if source.requires_feed else source.call_inputs()
        steps = steps_tensor(k)
        try:
            if self.calls:
                packed, hists = self.function(steps, *feeds)
            else:
                packed, hists = self._first_call(steps, feeds)
            result = self.stats.decode(packed, hists, steps=k)
        except tf.errors.InvalidArgumentError as e:
            clear = scalar_cost_error(e)
            if clear is None:
                raise
            raise clear from None
        self.calls += 1
        return result

    # --- the first call: trace, check what XLA can compile, compile, run ------------------------
    def _devices(self) -> List[str]:
        return replica_devices(self.spec.strategy)

    def _give_up_xla(self, ops: List[str], why: str, error: Optional[Exception] = None) -> None:
        self.xla.cannot_compile(ops, why, error)   # raises under jit_compile=True
        self._build()

    def _first_call(self, steps: tf.Tensor, feeds: list):
        t0 = time.perf_counter()
        try:
            concrete = self.function.get_concrete_function(steps, *feeds)
        except RuntimeError as e:
            # a tower that updates a mirrored tf.Variable itself (not a Keras variable, whose
            # updates are moved out of the XLA cluster): the strategy's merge_call cannot be in it
            if not (self.xla.use_xla and "merge_call" in str(e)):
                raise
            self._give_up_xla(["an update of a mirrored tf.Variable in the tower"],
                              "the strategy synchronises it with a merge_call, which cannot be inside XLA")
            t0 = time.perf_counter()
            concrete = self.function.get_concrete_function(steps, *feeds)
        traced = time.perf_counter() - t0
        if self.xla.use_xla:
            bad = xla_unsupported_ops(concrete, device_type(self._devices()[0]))
            if bad:
                self._give_up_xla(bad, "they have no XLA kernel")
                t0 = time.perf_counter()
                self.function.get_concrete_function(steps, *feeds)
                traced = time.perf_counter() - t0
        t1 = time.perf_counter()
        try:
            out = self.function(steps, *feeds)
            out[0].numpy()
        except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError, tf.errors.NotFoundError,
                tf.errors.InternalError) as e:
            ops = xla_error_ops(e) if self.xla.use_xla and scalar_cost_error(e) is None else None
            if ops is None:
                raise
            # (one batch per replica was taken from the input by the failed call)
            self._give_up_xla(ops, f"XLA failed: {str(e).strip().splitlines()[0][:300]}", e)
            t1 = time.perf_counter()
            out = self.function(steps, *feeds)
            out[0].numpy()
        first = time.perf_counter() - t1
        self.trace_seconds, self.first_call_seconds = traced, first
        self.xla.log_first_call(traced, first, int(steps.numpy()))
        return out
