"""The Trainer: builds the model once, runs the train function call after call, runs callbacks.

The run flow (see DESIGN.md): variables are created once by tracing the tower in
the strategy's scope; the optimizer is built; then one ``tf.function`` runs ``k``
steps in a ``tf.range`` loop, each step pulling its batch in-graph from the
InputSource, in every replica. Python runs only between calls: counters and
callbacks.

What this module owns: the set-up (strategy, variables, optimizer, checkpoint), the main loop
(epochs, calls, counters, callbacks), and the hooks subclasses override (the strategy,
:meth:`Trainer._make_strategy`; a reduction of gradients, :meth:`Trainer._reduce_gradients`).
What it leaves to others, one concern each:

- ``train_function.py``: what a step computes (cost, gradients, update, statistics, NaN check);
- ``xla.py``: whether and where XLA compiles the step, and the first call's checks;
- ``steps_per_call.py``: how many steps the next call runs;
- ``stop_signals.py``: Ctrl-C, SIGTERM and stalled input, watched from a helper thread;
- ``config.py``: checking what the user asked for.
"""
from __future__ import annotations

import math
import signal
import time
from typing import Dict, List, Optional, Sequence, Union

import keras
import numpy as np
import tensorflow as tf

from ..callbacks.base import Callback, StopTraining
from ..callbacks.defaults import DEFAULT_CALLBACKS, DEFAULT_MONITORS
from ..tfutils.extensions import learning_rate_variable
from ..tfutils.global_step import global_step_of, set_current_global_step
from ..input_source.base import InputSource, InputSourceError
from ..tfutils.sessinit import JustCurrentSession, SessionInit
from ..tfutils.tower_func import scalar_cost_error
from ..utils import logger
from .steps_per_call import StepsPerCall
from .stop_signals import StopSignals, TrainingTerminated, stop_signal_scope
from .objectives import resolve_objectives
from .train_function import build_train_function
from .xla import XlaPolicy, xla_unsupported_ops  # noqa: F401 (xla_unsupported_ops: its old path)

__all__ = ["Trainer", "StopTraining", "TrainingTerminated"]


_PRECISIONS = {None: None, "fp32": None, "float32": None, "bf16": "mixed_bfloat16",
               "mixed_bfloat16": "mixed_bfloat16", "fp16": "mixed_float16", "mixed_float16": "mixed_float16"}


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
        self.steps = StepsPerCall(steps_per_call, self.target_call_seconds, self.max_auto_steps_per_call)
        if precision not in _PRECISIONS:
            raise ValueError(f"precision must be one of {sorted(k for k in _PRECISIONS if k)}; got {precision!r}")
        self.precision = _PRECISIONS[precision]
        self.xla = XlaPolicy(jit_compile)   # jit_compile: asked; use_xla / xla_region: what this run does
        # the first call: seconds tracing the train function, then running it (XLA compile included)
        self.trace_seconds: Optional[float] = None
        self.first_call_seconds: Optional[float] = None
        self.average = bool(average)
        self.epoch_num = 0
        self.global_step = 0
        self.loop_completed = False
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
        self._steps_tensors: Dict[int, tf.Tensor] = {}
        self._call_started: Optional[float] = None
        self._stop: Optional[StopSignals] = None   # Ctrl-C / SIGTERM handling of the running loop

    # --- distribution: subclasses override ----------------------------------------------
    def _make_strategy(self) -> tf.distribute.Strategy:
        return tf.distribute.get_strategy()

    def _reduce_gradients(self, grads: List[tf.Tensor]) -> List[tf.Tensor]:
        """Hook for trainers that reduce gradients themselves (Horovod); identity by default."""
        return grads

    # (read by the XLA policy: an update without a reduction of its own may join the XLA cluster)
    _reduce_gradients.identity = True

    @property
    def num_replicas(self) -> int:
        return self.strategy.num_replicas_in_sync

    # --- building --------------------------------------------------------------------------
    def setup_graph(self, model, input_source: InputSource) -> None:
        """Set up the input, create every variable and the optimizer, trace nothing yet."""
        with stop_signal_scope(self, setting_up=True):   # a Ctrl-C is raised once set-up ends
            self._setup_graph(model, input_source)

    def _setup_graph(self, model, input_source: InputSource) -> None:
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
                self.objectives = resolve_objectives(model, model.get_optimizer(), self.tower_func.cost_names,
                                                     self._named_trainable(), self.precision)
                self.optimizer = self.objectives[0].optimizer   # the only one, or the first objective's
                self.epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        finally:
            keras.mixed_precision.set_global_policy(previous_policy)
        more = {f"optimizer_{o.name}": o.optimizer for o in self.objectives[1:]}
        self.checkpoint = tf.train.Checkpoint(model=self.model_variables, optimizer=self.optimizer,
                                              global_step=self.global_step_var, epoch=self.epoch_var, **more)
        self.xla.resolve(self)
        self._train_fn = self._make_train_function()
        if self.outputs_are_latest:
            # its optimizers merge the replicas' gradients inside the step, where XLA cannot go
            self.xla.disable(self, "the model updates its variables itself (its own train step)")
        logger.info("Model built: %d trainable variables, %s parameters, %d replica(s).",
                    len(self.trainable_variables),
                    f"{sum(int(np.prod(v.shape)) for v in self.trainable_variables):,}", self.num_replicas)

    def _make_train_function(self):
        fn, self._output_names = build_train_function(self)
        return fn

    # --- XLA: the policy object decides; these are its public faces --------------------------
    @property
    def jit_compile(self) -> Union[bool, str]:
        return self.xla.jit_compile

    @jit_compile.setter
    def jit_compile(self, value: Union[bool, str]) -> None:
        self.xla = XlaPolicy(value)

    @property
    def use_xla(self) -> bool:
        return self.xla.use_xla

    @property
    def xla_region(self) -> Optional[str]:
        return self.xla.region

    def disable_xla(self, reason: str) -> None:
        """Train without XLA: for a callback whose graph changes XLA would undo (LMS), called
        in its ``setup_graph``, before the first step. ``jit_compile=True`` keeps XLA, with a warning."""
        self.xla.disable(self, reason)

    def _call_train_fn(self, k: int, feeds: list):
        if self.steps.calls > 0:
            return self._train_fn(self._steps_tensor(k), *feeds)
        return self.xla.first_call(self, self._steps_tensor(k), feeds)   # trace, check XLA, compile, run

    def _named_trainable(self) -> Dict[str, tf.Variable]:
        ids = {id(v) for v in self.trainable_variables}
        return {n: v for n, v in self.model_variables.named_variables().items() if id(v) in ids}

    @property
    def named_optimizers(self) -> Optional[Dict[str, keras.optimizers.Optimizer]]:
        """``{objective name: optimizer}`` of a model whose ``optimizer()`` returns Objectives (their
        state is saved under ``optimizer/<name>/``); None for a model with one optimizer."""
        if not getattr(self, "objectives", None) or self.objectives[0].implicit:
            return None
        return {o.name: o.optimizer for o in self.objectives}

    @property
    def outputs_are_latest(self) -> bool:
        """``last_step_outputs`` are the call's last step's statistics (running values of a step
        that updates itself, e.g. Keras metrics' results), not the call's means."""
        return bool(getattr(self, "objectives", None)) and not any(o.applied for o in self.objectives)

    # --- running ---------------------------------------------------------------------------
    def get_hyperparam_var(self, name: str):
        """The variable behind a hyper-parameter: the learning rate (``'<objective>/learning_rate'``
        with several objectives), or a model variable by name."""
        optimizers = self.named_optimizers
        head, _, tail = name.rpartition("/")
        if optimizers and tail in ("learning_rate", "lr") and head in optimizers:
            return self._learning_rate_of(optimizers[head], name)
        if name in ("learning_rate", "lr"):
            if optimizers and len(optimizers) > 1:
                raise KeyError(f"Hyper-parameter '{name}': the model has several optimizers; name one: "
                               + ", ".join(f"'{n}/learning_rate'" for n in optimizers) + ".")
            return self._learning_rate_of(self.optimizer, name)
        named = self.named_variables()
        if name in named:
            return named[name]
        attr = getattr(self.model, name, None)
        if attr is not None and hasattr(attr, "assign"):
            return attr
        raise KeyError(f"No hyper-parameter '{name}': use 'learning_rate', a variable name "
                       f"({sorted(named)[:10]}...) or a tf.Variable attribute of the model.")

    def _learning_rate_of(self, optimizer, name: str):
        opt = getattr(optimizer, "inner_optimizer", optimizer)
        lr = opt.learning_rate
        if not hasattr(lr, "assign") and learning_rate_variable(opt) is not None:
            return learning_rate_variable(opt)  # a tfv1 optimizer's learning-rate variable
        named = self.named_variables()
        if not hasattr(lr, "assign") and name in named:
            return named[name]  # a learning-rate variable of the model (tfv1.get_variable idiom)
        if not hasattr(lr, "assign"):
            raise TypeError(f"The learning_rate of the optimizer behind '{name}' is a schedule, not a variable; "
                            "give it a float to let callbacks set it.")
        return lr

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
        return self.steps.choose(self.steps_per_epoch - self.local_step, self._callbacks_max_steps(),
                                 self.input.requires_feed)

    @property
    def steps_per_call(self) -> Union[str, int]:
        return self.steps.steps_per_call

    def _steps_tensor(self, k: int) -> tf.Tensor:
        t = self._steps_tensors.get(k)
        if t is None:
            t = self._steps_tensors[k] = tf.constant(k, tf.int32)
        return t

    def run_step_call(self, k: int) -> Dict[str, float]:
        """Run ``k`` training steps in one call; update counters and ``last_step_outputs``."""
        if self._stop_requested():   # a stop whose exception was lost between calls
            raise self._stop.exception()
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
            self._raise_for_closed_input(e)
        finally:
            self._call_started = None
        self.steps.update(k, time.perf_counter() - t0)
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

    def _raise_for_closed_input(self, error: Exception) -> None:
        """A call failed because its input was closed: a stop signal's doing (its steps are counted,
        its exception raised), or the input's (its own error, else one that says so)."""
        if self._stop_requested():
            self._count_steps_done_in_graph()
            raise self._stop.exception() from None
        self.input.raise_pending_error()
        raise InputSourceError(f"The input of training ({type(self.input).__name__}) was closed while a step "
                               "waited for data.") from error

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
        with stop_signal_scope(self) as stop:
            terminated = self._run_main_loop(stop, cbs)
        if terminated is not None:
            logger.info("Exiting with status %d (SIGTERM). Run the same command again to resume "
                        "(AutoResumeTrainConfig).", terminated.code)
            raise terminated

    def _run_main_loop(self, stop: StopSignals, cbs) -> Optional[TrainingTerminated]:
        terminated: Optional[TrainingTerminated] = None
        self.loop_completed = False   # for after_train: the loop ended (all epochs, or a callback's stop)
        try:
            stop.setting_up = False   # from here on, a Ctrl-C between calls is raised at once
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
            self.loop_completed = True
        except StopTraining as e:
            logger.info("Training was stopped by a callback: %s", e or type(e).__name__)
            self.loop_completed = True
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
            stop.raised = True
        finally:
            try:
                if terminated is not None:
                    logger.info("SIGTERM: training stopped at global step %d; ending it (callbacks save "
                                "the last step).", self.global_step)
                cbs.after_train()
            finally:   # whatever interrupts the above (a second Ctrl-C): no thread or worker is left
                self.input.close()
        return terminated

    def train(self, callbacks: Sequence[Callback], monitors: Sequence[Callback],
              session_init: Optional[SessionInit], steps_per_epoch: int, starting_epoch: int,
              max_epoch: int) -> None:
        """Set up callbacks, load weights, and run the main loop (the model must be set up)."""
        with stop_signal_scope(self, setting_up=True):   # a Ctrl-C while loading is raised before step 1
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
