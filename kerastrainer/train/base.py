"""The Trainer: builds the model once, traces a multi-step train function, runs callbacks.

The run flow (see DESIGN.md): variables are created once by tracing the tower in
the strategy's scope; the optimizer is built; then one ``tf.function`` runs ``k``
steps in a ``tf.range`` loop, each step pulling its batch in-graph from the
InputSource, in every replica. Python runs only between calls: counters and
callbacks.

Subclasses choose the distribution strategy (:meth:`Trainer._make_strategy`) and
may post-process gradients (:meth:`Trainer._reduce_gradients`).
"""
from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import threading
import time
from typing import Dict, List, Optional, Sequence, Union

import keras
import numpy as np
import tensorflow as tf

from ..callbacks.base import Callback, StopTraining
from ..compat.global_step import global_step_of, set_current_global_step
from ..compat.keras_random import with_keras_random_state
from ..compat.optimizer import learning_rate_variable
from ..input_source.base import InputSource, InputSourceError
from ..tfutils.sessinit import JustCurrentSession, SessionInit
from ..tfutils.tower_func import scalar_cost_error
from ..utils import logger
from ..utils.concurrency import describe_child_processes
from ..utils.devices import current_replica_index, device_type
from .stop_signals import StopSignals, TrainingTerminated
from ..utils.utils import execute_only_once
from ..utils.xla_flags import default_flags_state

__all__ = ["Trainer", "StopTraining", "TrainingTerminated"]


_PRECISIONS = {None: None, "fp32": None, "float32": None, "bf16": "mixed_bfloat16",
               "mixed_bfloat16": "mixed_bfloat16", "fp16": "mixed_float16", "mixed_float16": "mixed_float16"}


# a per-replica output of the step: 1.0 where a gradient holds NaN or Inf
NONFINITE_GRADS = "_nonfinite_grads"


class _DeferredUpdates(keras.StatelessScope):
    """Keras-variable updates made in the scope are recorded, not applied: ``updates`` maps
    ``id(variable)`` to ``(variable, new value)``; reads in the scope see the new values."""

    def __init__(self):
        super().__init__()
        self.updates: Dict[int, tuple] = {}

    def add_update(self, update):
        variable, value = update
        self.updates[id(variable)] = (variable, value)
        super().add_update(update)


_xla_kernels_registered = False


def _xla_kernel_registration(x):  # a one-op XLA module (named so in XLA dumps)
    return x + 1


def xla_unsupported_ops(concrete_function, device_type: str = "CPU") -> List[str]:
    """``'OpType (node)'`` of each op of the XLA-compiled functions in a traced function
    that has no XLA kernel on ``device_type`` (``'CPU'``/``'GPU'``): what XLA would fail on.

    Read from the graph, before anything runs: no data is consumed, no collective started.
    """
    from tensorflow.python.framework import kernels

    global _xla_kernels_registered
    if not _xla_kernels_registered:  # XLA registers its compilation kernels when first used
        with tf.device("/device:CPU:0"):
            tf.function(_xla_kernel_registration, jit_compile=True)(tf.constant(0.0))
        _xla_kernels_registered = True
    jit_device = f"XLA_{device_type.upper()}_JIT"
    library = {f.signature.name: f for f in concrete_function.graph.as_graph_def().library.function}
    todo = [name for name, f in library.items() if "_XlaMustCompile" in f.attr and f.attr["_XlaMustCompile"].b]
    seen, bad, supported = set(todo), {}, {}
    while todo:
        for node in library[todo.pop()].node_def:
            called = [node.op] if node.op in library else []
            for value in node.attr.values():
                called += [value.func.name] if value.HasField("func") else [f.name for f in value.list.func]
            for name in called:
                if name in library and name not in seen:
                    seen.add(name)
                    todo.append(name)
            if node.op in library:
                continue
            if node.op not in supported:
                supported[node.op] = any(kd.device_type == jit_device
                                         for kd in kernels.get_registered_kernels_for_op(node.op).kernel)
            if not supported[node.op]:
                bad.setdefault(node.op, node.name)
    return [f"{op} ({name})" for op, name in sorted(bad.items())]


_NO_XLA_KERNEL = re.compile(r"No registered '([^']+)' OpKernel for XLA_\w+ devices")


def _xla_error_ops(error: Exception) -> Optional[List[str]]:
    """The ops an XLA compile error names, or None when the error is not XLA's."""
    msg = str(error)
    if not re.search(r"XLA_\w+_JIT|tf2xla|XLA compilation|_XlaMustCompile", msg):
        return None
    return sorted(set(_NO_XLA_KERNEL.findall(msg))) or ["(an op XLA rejected, see the message)"]


class Trainer:
    """Base class of trainers.

    Args:
        steps_per_call: steps run by one call of the train function. ``'auto'`` (the
            default) grows it until a call takes about ``target_call_seconds``, never
            past an epoch end or a step a callback asked to see; an int fixes it.
        precision: ``None``/``'fp32'``, ``'bf16'`` (``'mixed_bfloat16'``) or ``'fp16'``
            (``'mixed_float16'``, with dynamic loss scaling).
        jit_compile: compile each step with XLA. ``'auto'`` (the default): on when the
            strategy's devices include a GPU, off on CPU devices (XLA's CPU backend was
            not faster, see docs/training.md); if XLA cannot compile the step (an op with
            no XLA kernel, e.g. ``tf.py_function``), training goes on without XLA after one
            warning naming the op. ``True``: always, and such an op is an error. ``False``: never.
            One replica: the whole step (forward, backward, optimizer update) is one XLA
            cluster; several replicas or processes: forward and backward (the all-reduce
            and the update stay outside). The input's dequeue is never inside.
        average: average gradients over towers (True) or sum them.
    """

    is_chief = True
    # A call costs a few ms of host time (dispatch, fetching outputs, callbacks); half a
    # second per call keeps that near 1% while progress and callbacks stay responsive.
    target_call_seconds = 0.5
    max_auto_steps_per_call = 1000
    # jit_compile='auto' on CPU devices: off, as XLA's CPU backend was not faster than TF's
    # own kernels on the models measured (docs/training.md); True to use XLA there too
    auto_xla_on_cpu = False
    # a step that waited this long on an empty input queue is reported (then as often again)
    stall_report_seconds = 30.0
    # SIGTERM stops training after the current call and saves (TrainingTerminated). Trainers of
    # several processes keep SIGTERM's default: one process stopping alone would leave the
    # others waiting in a collective.
    graceful_sigterm = True

    def __init__(self, steps_per_call: Union[str, int] = "auto", precision: Optional[str] = None,
                 jit_compile: Union[bool, str] = "auto", average: bool = True):
        if steps_per_call != "auto" and (not isinstance(steps_per_call, int) or steps_per_call < 1):
            raise ValueError(f"steps_per_call must be 'auto' or a positive int; got {steps_per_call!r}")
        if precision not in _PRECISIONS:
            raise ValueError(f"precision must be one of {sorted(k for k in _PRECISIONS if k)}; got {precision!r}")
        if isinstance(jit_compile, str) and jit_compile != "auto" or jit_compile not in (True, False, "auto"):
            raise ValueError(f"jit_compile must be True, False or 'auto'; got {jit_compile!r}")
        self.steps_per_call = steps_per_call
        self.precision = _PRECISIONS[precision]
        # what was asked for; use_xla / xla_region: what this run does (set in setup_graph)
        self.jit_compile = jit_compile if jit_compile == "auto" else bool(jit_compile)
        self.use_xla = False
        self.xla_region: Optional[str] = None
        # the first call: seconds tracing the train function, then running it (XLA compile included)
        self.trace_seconds: Optional[float] = None
        self.first_call_seconds: Optional[float] = None
        self.average = bool(average)
        self.epoch_num = 0
        self.global_step = 0
        self.local_step = 0
        self.steps_per_epoch = 0
        self.starting_epoch = 1
        self.max_epoch = 0
        self.last_step_outputs: Dict[str, float] = {}
        self.last_call_steps = 0
        self.monitors = None
        self.model = None
        self.input = None
        self._callbacks = None
        self._auto_k = 1
        self._step_seconds = None
        self._calls = 0
        self._steps_tensors: Dict[int, tf.Tensor] = {}
        self._call_started: Optional[float] = None
        self._stall_reported = 0.0
        self._stop: Optional[StopSignals] = None   # Ctrl-C / SIGTERM handling of the running loop

    # --- distribution: subclasses override ----------------------------------------------
    def _make_strategy(self) -> tf.distribute.Strategy:
        return tf.distribute.get_strategy()

    def _reduce_gradients(self, grads: List[tf.Tensor]) -> List[tf.Tensor]:
        """Hook for trainers that reduce gradients themselves (Horovod); identity by default."""
        return grads

    @property
    def num_replicas(self) -> int:
        return self.strategy.num_replicas_in_sync

    # --- building --------------------------------------------------------------------------
    def setup_graph(self, model, input_source: InputSource) -> None:
        """Set up the input, create every variable and the optimizer, trace nothing yet."""
        self.model = model
        self.strategy = self._make_strategy()
        self.input = input_source
        signature = model.get_input_signature()
        self.input_signature = signature
        input_source.setup(signature)
        if input_source.requires_feed and self.num_replicas > 1:
            raise ValueError("FeedInput feeds one replica; use QueueInput with several towers.")

        previous_policy = keras.mixed_precision.global_policy()
        if self.precision:
            keras.mixed_precision.set_global_policy(self.precision)
        try:
            with self.strategy.scope():
                # the model's step, made before the tower is built: get_global_step_var() in
                # build_graph and optimizer() is this variable, incremented in-graph every step
                self.global_step_var = global_step_of(model.layer_store)
                self.global_step_var.assign(0)  # a new trainer starts at 0 unless a checkpoint says otherwise
                set_current_global_step(self.global_step_var)
                self.tower_func = model.get_tower_function()
                self.tower_func.build(total=self.num_replicas)
                self.model_variables = model.get_model_variables()
                self.layer_store = model.layer_store
                self.trainable_variables = self.model_variables.trainable_list
                if not self.trainable_variables:
                    raise ValueError(f"{type(model).__name__} has no trainable variables: build_graph "
                                     "created no layer or variable.")
                opt = model.get_optimizer()
                if not isinstance(opt, keras.optimizers.Optimizer):
                    raise TypeError(f"{type(model).__name__}.optimizer() must return a Keras optimizer; "
                                    f"got {type(opt).__name__}")
                if self.precision == "mixed_float16" and not isinstance(opt, keras.optimizers.LossScaleOptimizer):
                    opt = keras.optimizers.LossScaleOptimizer(opt)
                opt.build(self.trainable_variables)
                self.optimizer = opt
                self.epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        finally:
            keras.mixed_precision.set_global_policy(previous_policy)
        self.checkpoint = tf.train.Checkpoint(model=self.model_variables, optimizer=self.optimizer,
                                              global_step=self.global_step_var, epoch=self.epoch_var)
        self.use_xla = self._resolve_jit_compile()
        if self.use_xla and any(device_type(d) == "GPU" for d in self._replica_devices()):
            _check_default_xla_flags()
        self._train_fn = self._make_train_function()
        logger.info("Model built: %d trainable variables, %s parameters, %d replica(s).",
                    len(self.trainable_variables),
                    f"{sum(int(np.prod(v.shape)) for v in self.trainable_variables):,}", self.num_replicas)

    def _make_train_function(self):
        strategy = self.strategy
        num_replicas = self.num_replicas
        opt = self.optimizer
        variables = self.trainable_variables
        tower = self.tower_func
        source = self.input
        summary_names = list(tower.summary_names)
        # The trainer reports the returned cost as 'cost'. A moving summary the tower itself
        # names 'cost' (tensorpack programs often add_moving_summary the cost they return) is
        # reported under that name instead, as in tensorpack; the trainer's own then goes under
        # '_cost' (hidden from the monitors, still checked for NaN).
        cost_key = "_cost" if "cost" in summary_names else "cost"
        histogram_names = list(tower.histogram_names)
        loss_scale = isinstance(opt, keras.optimizers.LossScaleOptimizer)
        scale = 1.0 / num_replicas if self.average else 1.0
        # XLA region: never the input's dequeue (queue and iterator ops have no XLA kernel);
        # the update too where it has no all-reduce (see _xla_region)
        self.xla_region = self._xla_region() if self.use_xla else None
        # A strategy synchronises an update of a mirrored variable (BatchNorm statistics) with
        # a merge_call, which cannot run inside a nested function: with XLA on the tower only,
        # its Keras-variable updates are collected in the cluster and applied after it.
        defer = self.xla_region == "forward_backward"
        deferred: Dict[int, list] = {}  # replica -> the Keras variables its tower updates

        def forward_backward(*inputs):
            rid = current_replica_index()
            updates = _DeferredUpdates() if defer else contextlib.nullcontext()
            with tf.GradientTape() as tape, updates:
                cost, ctx = tower(*inputs, name=f"tower{rid}", is_training=True, index=rid, total=num_replicas)
                cost32 = tf.cast(cost, tf.float32)
                loss = cost32 * scale
                if loss_scale:
                    loss = opt.scale_loss(loss)
            grads = tape.gradient(loss, variables)
            # NaN/Inf in the input can leave the cost finite (max(NaN, 0) is 0 on some kernels) and
            # still poison the gradients: the non-finite check looks at both
            finite = [tf.reduce_all(tf.math.is_finite(g)) for g in grads if g is not None]
            outs = {cost_key: cost32,
                    NONFINITE_GRADS: 1.0 - tf.cast(tf.reduce_all(finite) if finite else True, tf.float32)}
            for n in summary_names:
                # only the main tower records summaries; the others add zeros to the sum
                outs[n] = tf.cast(ctx.moving_summaries[n], tf.float32) if n in ctx.moving_summaries \
                    else tf.constant(0.0)
            hists = {n: ctx.tensor_summaries.get(n, tf.zeros([0])) for n in histogram_names}
            new_values = []
            if defer:
                deferred[rid] = [v for v, _ in updates.updates.values()]
                new_values = [value for _, value in updates.updates.values()]
            return grads, outs, hists, new_values

        def update(grads):
            pairs = [(g, v) for g, v in zip(self._reduce_gradients(list(grads)), variables) if g is not None]
            if not pairs:
                raise ValueError("No gradient flows from the cost to any trainable variable.")
            opt.apply_gradients(pairs)

        def whole_step(*inputs):
            grads, outs, hists, new_values = forward_backward(*inputs)
            for v, value in zip(deferred.get(current_replica_index(), []), new_values):
                v.assign(value)
            update(grads)
            return outs, hists

        if self.xla_region == "step":
            whole_step = tf.function(whole_step, jit_compile=True)
        elif self.xla_region == "forward_backward":
            forward_backward = tf.function(forward_backward, jit_compile=True)

        def replica_step(*feeds):
            inputs = list(feeds) if source.requires_feed else source.get_input_tensors()
            return whole_step(*inputs)

        mean, total = tf.distribute.ReduceOp.MEAN, tf.distribute.ReduceOp.SUM

        global_step = self.global_step_var

        def train_calls(k, *feeds):
            acc = {n: tf.constant(0.0) for n in [cost_key] + summary_names}
            first_bad = tf.constant(-1, tf.int64)
            first_bad_grads = tf.constant(-1, tf.int64)
            # histograms (vectors) and images (NHWC) of the call's last step, from the main
            # tower (replica 0); an empty value of unknown shape, so the loop may change it
            hist = {n: tf.compat.v1.placeholder_with_default(tf.zeros([0]), shape=None)
                    for n in histogram_names}
            for i in tf.range(k):
                # Keras keeps its random-seed state per thread, and replicas trace in threads of their own
                per_replica, per_replica_hist = strategy.run(with_keras_random_state(replica_step), args=feeds)
                global_step.assign_add(1)
                step = {n: strategy.reduce(mean if n == cost_key else total, per_replica[n], axis=None)
                        for n in acc}
                acc = {n: acc[n] + step[n] for n in acc}
                hist = {n: strategy.experimental_local_results(per_replica_hist[n])[0] for n in histogram_names}
                bad = tf.logical_not(tf.math.is_finite(step[cost_key]))
                bad_grads = strategy.reduce(total, per_replica[NONFINITE_GRADS], axis=None) > 0
                first_bad = tf.where(tf.logical_and(first_bad < 0, tf.logical_or(bad, bad_grads)),
                                     tf.cast(i, tf.int64), first_bad)
                first_bad_grads = tf.where(tf.logical_and(first_bad_grads < 0, bad_grads), tf.cast(i, tf.int64),
                                           first_bad_grads)
            kf = tf.cast(k, tf.float32)
            # one vector, so the host fetches the call's outputs in one transfer
            packed = tf.stack([acc[n] / kf for n in acc] + [tf.cast(first_bad_grads, tf.float32),
                                                             tf.cast(first_bad, tf.float32)])
            return packed, hist

        self._output_names = [cost_key] + summary_names
        return tf.function(train_calls)

    # --- XLA ---------------------------------------------------------------------------------
    def _replica_devices(self) -> List[str]:
        """The devices this process's replicas run on."""
        try:
            devices = list(self.strategy.extended.worker_devices)
        except (RuntimeError, AttributeError, NotImplementedError):  # the default strategy has none
            devices = []
        if not devices:
            gpus = tf.config.list_logical_devices("GPU")
            devices = [gpus[0].name if gpus else "/device:CPU:0"]
        return devices

    def _resolve_jit_compile(self) -> bool:
        if self.jit_compile != "auto":
            return bool(self.jit_compile)
        return any(device_type(d) == "GPU" or self.auto_xla_on_cpu for d in self._replica_devices())

    def _xla_region(self) -> str:
        """``'step'``: forward, backward and update in one XLA cluster (one replica, no
        all-reduce in the update); ``'forward_backward'``: the tower and its gradients."""
        one_device = self.num_replicas == 1 and (
            self.strategy is tf.distribute.get_strategy() or isinstance(self.strategy, tf.distribute.OneDeviceStrategy))
        own_reduce = type(self)._reduce_gradients is not Trainer._reduce_gradients
        return "step" if one_device and not own_reduce else "forward_backward"

    def _call_train_fn(self, k: int, feeds: list):
        if self._calls > 0:
            return self._train_fn(self._steps_tensor(k), *feeds)
        # the first call: trace, check that XLA can compile the step, compile, run
        t0 = time.perf_counter()
        try:
            concrete = self._train_fn.get_concrete_function(self._steps_tensor(k), *feeds)
        except RuntimeError as e:
            # a tower that updates a mirrored tf.Variable itself (not a Keras variable, whose
            # updates are moved out of the XLA cluster): the strategy's merge_call cannot be in it
            if not (self.use_xla and "merge_call" in str(e)):
                raise
            self._xla_cannot_compile(["an update of a mirrored tf.Variable in the tower"],
                                     "the strategy synchronises it with a merge_call, which cannot be inside XLA")
            t0 = time.perf_counter()
            concrete = self._train_fn.get_concrete_function(self._steps_tensor(k), *feeds)
        traced = time.perf_counter() - t0
        if self.use_xla:
            bad = xla_unsupported_ops(concrete, device_type(self._replica_devices()[0]))
            if bad:
                self._xla_cannot_compile(bad, "they have no XLA kernel")
                t0 = time.perf_counter()
                self._train_fn.get_concrete_function(self._steps_tensor(k), *feeds)
                traced = time.perf_counter() - t0
        t1 = time.perf_counter()
        try:
            out = self._train_fn(self._steps_tensor(k), *feeds)
            out[0].numpy()
        except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError, tf.errors.NotFoundError,
                tf.errors.InternalError) as e:
            ops = _xla_error_ops(e) if self.use_xla and scalar_cost_error(e) is None else None
            if ops is None:
                raise
            # (one batch per replica was taken from the input by the failed call)
            self._xla_cannot_compile(ops, f"XLA failed: {str(e).strip().splitlines()[0][:300]}", e)
            t1 = time.perf_counter()
            out = self._train_fn(self._steps_tensor(k), *feeds)
            out[0].numpy()
        first = time.perf_counter() - t1
        self.trace_seconds, self.first_call_seconds = traced, first
        if self.use_xla:
            logger.info("XLA: compiled the train step (%s) in %.1f s (the first call, %d step(s); tracing "
                        "took %.1f s before it).", "forward, backward and update" if self.xla_region == "step"
                        else "forward and backward", first, k, traced)
        else:
            logger.info("Traced the train function in %.1f s; its first call (%d step(s)) took %.1f s.",
                        traced, k, first)
        return out

    def disable_xla(self, reason: str) -> None:
        """Train without XLA: for a callback whose graph changes XLA would undo (LMS), called
        in its ``setup_graph``, before the first step. ``jit_compile=True`` keeps XLA, with a warning."""
        if not self.use_xla:
            return
        if self.jit_compile is True:
            logger.warning("jit_compile=True: XLA stays on although %s.", reason)
            return
        logger.info("XLA off (jit_compile='auto'): %s.", reason)
        self.use_xla = False
        self._train_fn = self._make_train_function()

    def _xla_cannot_compile(self, ops: List[str], why: str, error: Optional[Exception] = None) -> None:
        """jit_compile='auto': warn and rebuild the train function without XLA; True: raise."""
        names = ", ".join(ops)
        if self.jit_compile is True:
            msg = (f"jit_compile=True, but XLA cannot compile the train step: {names} ({why}). Remove "
                   "these ops from the tower (e.g. tf.py_function, string ops), or use jit_compile='auto' "
                   "(falls back to no XLA) or False.")
            if error is not None:
                raise type(error)(error.node_def, error.op, msg) from error
            raise ValueError(msg)
        logger.warning("XLA cannot compile the train step: %s (%s). Training without XLA "
                       "(jit_compile='auto'); pass jit_compile=False to skip this attempt.", names, why)
        self.use_xla = False
        self._train_fn = self._make_train_function()

    # --- running ---------------------------------------------------------------------------
    def get_hyperparam_var(self, name: str):
        """The variable behind a hyper-parameter: the learning rate, or a model variable by name."""
        if name in ("learning_rate", "lr"):
            opt = getattr(self.optimizer, "inner_optimizer", self.optimizer)
            lr = opt.learning_rate
            if not hasattr(lr, "assign") and learning_rate_variable(opt) is not None:
                return learning_rate_variable(opt)  # a tfv1 optimizer's learning-rate variable
            named = self.named_variables()
            if not hasattr(lr, "assign") and name in named:
                return named[name]  # a learning-rate variable of the model (tfv1.get_variable idiom)
            if not hasattr(lr, "assign"):
                raise TypeError("The optimizer's learning_rate is a schedule, not a variable; "
                                "give it a float to let callbacks set it.")
            return lr
        named = self.named_variables()
        if name in named:
            return named[name]
        attr = getattr(self.model, name, None)
        if attr is not None and hasattr(attr, "assign"):
            return attr
        raise KeyError(f"No hyper-parameter '{name}': use 'learning_rate', a variable name "
                       f"({sorted(named)[:10]}...) or a tf.Variable attribute of the model.")

    def named_variables(self) -> Dict[str, tf.Variable]:
        return self.model_variables.named_variables()

    def get_predictor(self, input_names: Sequence[str], output_names: Sequence[str], is_training: bool = False):
        """A callable numpy -> numpy running the tower in inference mode on the current weights."""
        return self.tower_func.predict_function(input_names, output_names, is_training=is_training)

    def sync_counters(self) -> None:
        """Copy the Python counters into the checkpointed variables (before saving)."""
        self.global_step_var.assign(self.global_step)
        self.epoch_var.assign(self.epoch_num if self.local_step >= self.steps_per_epoch else self.epoch_num - 1)

    def _callbacks_max_steps(self) -> Optional[int]:
        return self._callbacks.steps_to_next_trigger() if self._callbacks is not None else None

    def _choose_steps(self) -> int:
        k = self.steps_per_epoch - self.local_step
        if self.input.requires_feed:
            return 1
        wish = self._callbacks_max_steps()
        if wish is not None:
            k = min(k, max(1, int(wish)))
        if self.steps_per_call == "auto":
            k = min(k, self._auto_k)
        else:
            k = min(k, self.steps_per_call)
        return max(1, k)

    def _update_auto_steps(self, k: int, seconds: float) -> None:
        self._calls += 1
        if self._calls <= 1:  # the first call includes tracing
            return
        per_step = seconds / k
        self._step_seconds = per_step if self._step_seconds is None else 0.7 * self._step_seconds + 0.3 * per_step
        want = self.target_call_seconds / max(self._step_seconds, 1e-7)
        self._auto_k = int(min(self.max_auto_steps_per_call, max(1, want), self._auto_k * 4))

    def _steps_tensor(self, k: int) -> tf.Tensor:
        t = self._steps_tensors.get(k)
        if t is None:
            t = self._steps_tensors[k] = tf.constant(k, tf.int32)
        return t

    def run_step_call(self, k: int) -> Dict[str, float]:
        """Run ``k`` training steps in one call; update counters and ``last_step_outputs``."""
        feeds = self.input.next_feed() if self.input.requires_feed else []
        t0 = time.perf_counter()
        self._call_started = time.monotonic()
        try:
            packed, hists = self._call_train_fn(k, feeds)
            values = packed.numpy().tolist()
            outs = dict(zip(self._output_names, values))
            first_bad, first_bad_grads = int(values[-1]), int(values[-2])
        except tf.errors.InvalidArgumentError as e:
            clear = scalar_cost_error(e)
            if clear is None:
                raise
            raise clear from None
        except (tf.errors.OutOfRangeError, tf.errors.CancelledError) as e:
            if self._stop_requested():
                self._count_steps_done_in_graph()
                raise self._stop.exception() from None
            self.input.raise_pending_error()
            raise InputSourceError(
                f"The input of training ({type(self.input).__name__}) was closed while a step waited "
                "for data.") from e
        finally:
            self._call_started = None
        self._update_auto_steps(k, time.perf_counter() - t0)
        bad_step = self.global_step + first_bad if first_bad >= 0 else -1
        self.global_step += k
        self.local_step += k
        self.last_call_steps = k
        outs["_nonfinite_step"] = bad_step
        outs["_nonfinite_grads_step"] = self.global_step - k + first_bad_grads if first_bad_grads >= 0 else -1
        self.last_step_outputs = outs
        if hists and self.local_step >= self.steps_per_epoch and self.monitors is not None:
            for name, values in hists.items():
                if values.shape[0]:
                    arr = values.numpy()
                    if arr.ndim == 4:  # tf.summary.image in the tower
                        self.monitors.put_image(name, arr)
                    else:
                        self.monitors.put_histogram(name, arr)
        if self._stop_requested():   # the call finished: its steps are counted, then training stops
            raise self._stop.exception()
        return outs

    def _stop_requested(self) -> bool:
        return self._stop is not None and self._stop.requested

    def _count_steps_done_in_graph(self) -> None:
        """After a call cut short: count the steps it ran (the in-graph step counter has them),
        so that the end-of-training save is labelled with the step its weights are at."""
        try:
            done = int(self.global_step_var.numpy()) - self.global_step
        except Exception:   # noqa: BLE001 (a broken runtime: keep the Python counters)
            return
        if done > 0:
            self.global_step += done
            self.local_step += done

    def setup_callbacks(self, callbacks: Sequence[Callback], monitors: Sequence[Callback]) -> None:
        from ..callbacks.group import Callbacks
        from ..callbacks.monitor import Monitors
        cbs = list(callbacks) + list(self.input.get_callbacks())
        self.monitors = Monitors(list(monitors))
        cbs.append(self.monitors)
        if not self.is_chief:
            dropped = [str(c) for c in cbs if c.chief_only]
            cbs = [c for c in cbs if not c.chief_only]
            if dropped:
                logger.info("Chief-only callbacks not run on this worker: %s", ", ".join(dropped))
        self._callbacks = Callbacks(cbs)
        self._callbacks.setup_graph(self)

    def initialize(self, session_init: Optional[SessionInit]) -> None:
        (session_init or JustCurrentSession()).init(self)
        self.global_step = int(self.global_step_var.numpy())

    def main_loop(self, steps_per_epoch: int, starting_epoch: int, max_epoch: int) -> None:
        self.steps_per_epoch = int(steps_per_epoch)
        self.starting_epoch = int(starting_epoch)
        self.max_epoch = int(max_epoch)
        self.epoch_num = self.starting_epoch - 1
        cbs = self._callbacks
        stop = self._stop = StopSignals(self, self.graceful_sigterm, on_tick=self._check_input_stall)
        terminated: Optional[TrainingTerminated] = None
        try:
            stop.__enter__()   # inside the try: an interrupt while installing is undone by finally
            cbs.before_train()
            for self.epoch_num in range(self.starting_epoch, self.max_epoch + 1):
                logger.info("Start Epoch %d ...", self.epoch_num)
                self.local_step = 0
                start = time.time()
                cbs.before_epoch()
                while self.local_step < self.steps_per_epoch:
                    self.run_step_call(self._choose_steps())
                    cbs.trigger_step()
                cbs.after_epoch()
                logger.info("Epoch %d (global_step %d) finished, time: %.2f sec.",
                            self.epoch_num, self.global_step, time.time() - start)
                cbs.trigger_epoch()
            logger.info("Training has finished!")
        except StopTraining as e:
            logger.info("Training was stopped by a callback: %s", e or type(e).__name__)
        except KeyboardInterrupt:
            logger.info("Training interrupted (KeyboardInterrupt); cleaning up.")
            raise
        except TrainingTerminated as e:
            terminated = e
        except Exception as e:
            if stop.signum != signal.SIGTERM:
                raise
            # a group-wide SIGTERM also ends the DataFlow's workers: part of the same stop
            logger.info("While stopping on SIGTERM: %s: %s", type(e).__name__, e)
            terminated = TrainingTerminated()
        finally:
            try:
                stop.__exit__()
                if terminated is not None:
                    logger.info("SIGTERM: training stopped at global step %d; ending it (callbacks save "
                                "the last step).", self.global_step)
                cbs.after_train()
            finally:   # whatever interrupts the above (a second Ctrl-C): no thread or worker is left
                self._stop = None
                self.input.close()
        if terminated is not None:
            logger.info("Exiting with status %d (SIGTERM). Run the same command again to resume "
                        "(AutoResumeTrainConfig).", terminated.code)
            raise terminated

    def _check_input_stall(self) -> None:
        """Watcher thread: report a step that has waited long on an empty input queue."""
        started = self._call_started
        if started is None:
            self._stall_reported = 0.0
            return
        waited = time.monotonic() - started
        if waited < max(self.stall_report_seconds, self._stall_reported + self.stall_report_seconds):
            return
        if self.input.fill_level() != 0:
            return
        self._stall_reported = waited
        logger.warning("Training has waited %.0f s for input: %s has no batch ready. Worker processes: %s. "
                       "A worker that is 'stopped' was paused (SIGSTOP/Ctrl-Z); one that is 'running' is "
                       "slow or stuck in the DataFlow. Ctrl-C stops training.",
                       waited, type(self.input).__name__, describe_child_processes())

    def train(self, callbacks: Sequence[Callback], monitors: Sequence[Callback],
              session_init: Optional[SessionInit], steps_per_epoch: int, starting_epoch: int,
              max_epoch: int) -> None:
        """Set up callbacks, load weights, and run the main loop (the model must be set up)."""
        try:
            self.setup_callbacks(callbacks, monitors)
            self.initialize(session_init)
        except BaseException:
            self.input.close()
            raise
        self.main_loop(steps_per_epoch, starting_epoch, max_epoch)

    def train_with_defaults(self, callbacks: Optional[Sequence[Callback]] = None,
                            monitors: Optional[Sequence[Callback]] = None, session_creator=None,
                            session_init: Optional[SessionInit] = None, steps_per_epoch: Optional[int] = None,
                            starting_epoch: int = 1, max_epoch: int = 9999,
                            extra_callbacks: Optional[Sequence[Callback]] = None) -> None:
        """tensorpack's ``train_with_defaults``: :meth:`train` with the default extra callbacks and
        monitors where not given (call :meth:`setup_graph` first). ``steps_per_epoch`` defaults to
        the input's size; ``session_creator`` has no TF2 meaning and is warned about."""
        from .config import DEFAULT_CALLBACKS, DEFAULT_MONITORS
        if session_creator is not None:
            logger.warning("train_with_defaults(session_creator=...) has no meaning in TF2 (no sessions); "
                           "it is ignored.")
        if steps_per_epoch is None:
            steps_per_epoch = self.input.size() // max(1, getattr(self, "num_local_replicas", self.num_replicas))
        cbs = list(callbacks or []) + list(DEFAULT_CALLBACKS() if extra_callbacks is None else extra_callbacks)
        mons = DEFAULT_MONITORS() if monitors is None else list(monitors)
        self.train(cbs, mons, session_init, steps_per_epoch, starting_epoch, max_epoch)

    @property
    def epochs_done(self) -> float:
        return self.global_step / self.steps_per_epoch if self.steps_per_epoch else math.nan


def _check_default_xla_flags() -> None:
    """XLA on a GPU: warn (once) if XLA may have read XLA_FLAGS before kerastrainer added its defaults."""
    state = default_flags_state()
    if state["result"] == "added" and state["tf_started"] and execute_only_once():
        logger.warning(
            "TensorFlow had started before kerastrainer was imported, so XLA may not see the XLA_FLAGS it "
            "added (%s). A Keras model whose convolutions have biases can then sit for minutes in its first "
            "XLA compile with the GPU idle. Import kerastrainer before running TensorFlow, or set XLA_FLAGS "
            "in the shell.", " ".join(f for f in os.environ.get("XLA_FLAGS", "").split()
                                       if f.startswith("--xla_disable_hlo_passes")))
