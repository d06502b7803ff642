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

import math
import time
from typing import Dict, List, Optional, Sequence, Union

import keras
import numpy as np
import tensorflow as tf

from ..callbacks.base import Callback, StopTraining
from ..input_source.base import InputSource, InputSourceError
from ..tfutils.sessinit import JustCurrentSession, SessionInit
from ..utils import logger

__all__ = ["Trainer", "StopTraining"]

_PRECISIONS = {None: None, "fp32": None, "float32": None, "bf16": "mixed_bfloat16",
               "mixed_bfloat16": "mixed_bfloat16", "fp16": "mixed_float16", "mixed_float16": "mixed_float16"}


def _replica_index() -> int:
    ctx = tf.distribute.get_replica_context()
    if ctx is None:
        return 0
    rid = tf.get_static_value(ctx.replica_id_in_sync_group)
    return int(rid) if rid is not None else 0


class Trainer:
    """Base class of trainers.

    Args:
        steps_per_call: steps run by one call of the train function. ``'auto'`` (the
            default) grows it until a call takes about ``target_call_seconds``, never
            past an epoch end or a step a callback asked to see; an int fixes it.
        precision: ``None``/``'fp32'``, ``'bf16'`` (``'mixed_bfloat16'``) or ``'fp16'``
            (``'mixed_float16'``, with dynamic loss scaling).
        jit_compile: compile the forward and backward pass of each step with XLA.
        average: average gradients over towers (True) or sum them.
    """

    is_chief = True
    # A call costs a few ms of host time (dispatch, fetching outputs, callbacks); half a
    # second per call keeps that near 1% while progress and callbacks stay responsive.
    target_call_seconds = 0.5
    max_auto_steps_per_call = 1000

    def __init__(self, steps_per_call: Union[str, int] = "auto", precision: Optional[str] = None,
                 jit_compile: bool = False, average: bool = True):
        if steps_per_call != "auto" and (not isinstance(steps_per_call, int) or steps_per_call < 1):
            raise ValueError(f"steps_per_call must be 'auto' or a positive int; got {steps_per_call!r}")
        if precision not in _PRECISIONS:
            raise ValueError(f"precision must be one of {sorted(k for k in _PRECISIONS if k)}; got {precision!r}")
        self.steps_per_call = steps_per_call
        self.precision = _PRECISIONS[precision]
        self.jit_compile = bool(jit_compile)
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
                self.global_step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
                self.epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        finally:
            keras.mixed_precision.set_global_policy(previous_policy)
        self.checkpoint = tf.train.Checkpoint(model=self.model_variables, optimizer=self.optimizer,
                                              global_step=self.global_step_var, epoch=self.epoch_var)
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
        histogram_names = list(tower.histogram_names)
        loss_scale = isinstance(opt, keras.optimizers.LossScaleOptimizer)
        scale = 1.0 / num_replicas if self.average else 1.0

        def forward_backward(*inputs):
            rid = _replica_index()
            with tf.GradientTape() as tape:
                cost, ctx = tower(*inputs, name=f"tower{rid}", is_training=True, index=rid, total=num_replicas)
                cost32 = tf.cast(cost, tf.float32)
                loss = cost32 * scale
                if loss_scale:
                    loss = opt.scale_loss(loss)
            grads = tape.gradient(loss, variables)
            outs = {"cost": cost32}
            for n in summary_names:
                # only the main tower records summaries; the others add zeros to the sum
                outs[n] = tf.cast(ctx.moving_summaries[n], tf.float32) if n in ctx.moving_summaries \
                    else tf.constant(0.0)
            hists = {n: ctx.tensor_summaries.get(n, tf.zeros([0])) for n in histogram_names}
            return grads, outs, hists

        if self.jit_compile:
            forward_backward = tf.function(forward_backward, jit_compile=True)

        def replica_step(*feeds):
            inputs = list(feeds) if source.requires_feed else source.get_input_tensors()
            grads, outs, hists = forward_backward(*inputs)
            pairs = [(g, v) for g, v in zip(self._reduce_gradients(list(grads)), variables) if g is not None]
            if not pairs:
                raise ValueError("No gradient flows from the cost to any trainable variable.")
            opt.apply_gradients(pairs)
            return outs, hists

        mean, total = tf.distribute.ReduceOp.MEAN, tf.distribute.ReduceOp.SUM

        def train_calls(k, *feeds):
            acc = {n: tf.constant(0.0) for n in ["cost"] + summary_names}
            first_bad = tf.constant(-1, tf.int64)
            # histograms of the call's last step, from the main tower (replica 0)
            # (an empty vector of unknown static length, so the loop may change its length)
            hist = {n: tf.compat.v1.placeholder_with_default(tf.zeros([0]), shape=[None])
                    for n in histogram_names}
            for i in tf.range(k):
                per_replica, per_replica_hist = strategy.run(replica_step, args=feeds)
                step = {n: strategy.reduce(mean if n == "cost" else total, per_replica[n], axis=None)
                        for n in acc}
                acc = {n: acc[n] + step[n] for n in acc}
                hist = {n: strategy.experimental_local_results(per_replica_hist[n])[0] for n in histogram_names}
                bad = tf.logical_not(tf.math.is_finite(step["cost"]))
                first_bad = tf.where(tf.logical_and(first_bad < 0, bad), tf.cast(i, tf.int64), first_bad)
            kf = tf.cast(k, tf.float32)
            # one vector, so the host fetches the call's outputs in one transfer
            packed = tf.stack([acc[n] / kf for n in acc] + [tf.cast(first_bad, tf.float32)])
            return packed, hist

        self._output_names = ["cost"] + summary_names
        return tf.function(train_calls)

    # --- running ---------------------------------------------------------------------------
    def get_hyperparam_var(self, name: str):
        """The variable behind a hyper-parameter: the learning rate, or a model variable by name."""
        if name in ("learning_rate", "lr"):
            opt = getattr(self.optimizer, "inner_optimizer", self.optimizer)
            lr = opt.learning_rate
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
        try:
            packed, hists = self._train_fn(self._steps_tensor(k), *feeds)
            values = packed.numpy().tolist()
            outs = dict(zip(self._output_names, values))
            first_bad = int(values[-1])
        except (tf.errors.OutOfRangeError, tf.errors.CancelledError) as e:
            self.input.raise_pending_error()
            raise InputSourceError(
                f"The input of training ({type(self.input).__name__}) was closed while a step waited "
                "for data.") from e
        self._update_auto_steps(k, time.perf_counter() - t0)
        bad_step = self.global_step + first_bad if first_bad >= 0 else -1
        self.global_step += k
        self.local_step += k
        self.last_call_steps = k
        outs["_nonfinite_step"] = bad_step
        self.last_step_outputs = outs
        if hists and self.local_step >= self.steps_per_epoch and self.monitors is not None:
            for name, values in hists.items():
                if values.shape[0]:
                    self.monitors.put_histogram(name, values.numpy())
        return outs

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
        try:
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
        finally:
            try:
                cbs.after_train()
            finally:
                self.input.close()

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

    @property
    def epochs_done(self) -> float:
        return self.global_step / self.steps_per_epoch if self.steps_per_epoch else math.nan
