"""The Trainer: builds the model once, runs the train function call after call, runs callbacks.

The run flow (docs/internals.md, "One training run, start to end"): variables are created
once by tracing the tower in the strategy's scope; the optimizer is built; then one
``tf.function`` runs ``k`` steps in a ``tf.range`` loop, each step pulling its batch in-graph
from the InputSource, in every replica. Python runs only between calls: counters and callbacks.

What this module owns: the set-up (strategy, variables, optimizer, checkpoint, the step
runner), and the hooks subclasses override (the strategy, :meth:`Trainer._make_strategy`; a
reduction of gradients, :meth:`Trainer._reduce_gradients`; the step runner,
:meth:`Trainer._make_step_runner`). What it leaves to others, one concern each:

- ``loop.py``: the fit loop (epochs, calls, counters, callbacks' hooks, stop signals, input close);
- ``step_runner.py``: running ``k`` steps (the ``tf.function`` step, the no-op);
- ``train_function.py``: what a step computes (cost, gradients, update, statistics, NaN check);
- ``xla.py``: whether and where XLA compiles the step;
- ``steps_per_call.py``: how many steps the next call runs;
- ``stop_signals.py``: Ctrl-C, SIGTERM and stalled input, watched from a helper thread;
- ``config.py``: checking what the user asked for.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Union

import keras
import numpy as np
import tensorflow as tf

from ..callbacks.base import Callback, StopTraining
from ..callbacks.trainer_view import TrainerView
from ..callbacks.defaults import DEFAULT_CALLBACKS, DEFAULT_MONITORS
from ..graph_builder.utils import tower_device
from ..tfutils.extensions import launch_contexts, learning_rate_variable
from ..tfutils.global_step import global_step_of, set_current_global_step
from ..input_source.base import InputSource
from ..tfutils.sessinit import JustCurrentSession, SessionInit
from ..tfutils.tower_func import TowerFunction
from .._internals import tf1_default_session
from ..utils import logger
from ..utils.argtools import log_once
from ..utils.cpu_allocator import bfc_may_be_late
from .loop import FitLoop
from .model_desc import model_of_functions
from .objectives import resolve_objectives
from .step_runner import FunctionStepRunner, StepRunner
from .steps_per_call import StepsPerCall
from .stop_signals import StopSignals, TrainingTerminated, stop_signal_scope
from .train_function import StepSpec
from .xla import XlaPolicy, replica_devices, xla_unsupported_ops  # noqa: F401 (xla_unsupported_ops: its old path)

__all__ = ["Trainer", "StopTraining", "TrainingTerminated"]


_PRECISIONS = {None: None, "fp32": None, "float32": None, "bf16": "mixed_bfloat16",
               "mixed_bfloat16": "mixed_bfloat16", "fp16": "mixed_float16", "mixed_float16": "mixed_float16"}


class Trainer(TrainerView):
    """Base class of trainers (each is the :class:`TrainerView` its callbacks see).

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
        self.step_runner: Optional[StepRunner] = None   # made once the model is set up
        self.loop = FitLoop(self)
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
        self._call_started: Optional[float] = None
        self._stop: Optional[StopSignals] = None   # Ctrl-C / SIGTERM handling of the running loop

    # --- distribution: subclasses override ----------------------------------------------
    def _make_strategy(self) -> tf.distribute.Strategy:
        return tf.distribute.get_strategy()

    def _reduce_gradients(self, grads: List[tf.Tensor]) -> List[tf.Tensor]:
        """Hook for trainers that reduce gradients themselves (Horovod); identity by default."""
        return grads

    def _own_gradient_reduction(self) -> bool:
        return type(self)._reduce_gradients is not Trainer._reduce_gradients

    @property
    def num_replicas(self) -> int:
        return self.strategy.num_replicas_in_sync

    # --- building --------------------------------------------------------------------------
    def setup_graph(self, model, input_source: InputSource, get_cost_fn=None, get_opt_fn=None) -> None:
        """Set up the input, create every variable and the optimizer, trace nothing yet.

        ``model`` is a ModelDesc; tensorpack's form ``setup_graph(input_signature, input,
        get_cost_fn, get_opt_fn)`` is accepted too (a ModelDesc of those functions)."""
        model = model_of_functions(type(self).__name__, model, get_cost_fn, get_opt_fn)
        # launch_contexts: a program in TF1 graph mode (eager turned off) gets eager set-up
        with launch_contexts(f"{type(self).__name__}.setup_graph"), \
                stop_signal_scope(self, setting_up=True):   # a Ctrl-C is raised once set-up ends
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
        self.step_runner = self._make_step_runner()
        logger.info("Model built: %d trainable variables, %s parameters, %d replica(s).",
                    len(self.trainable_variables),
                    f"{sum(int(np.prod(v.shape)) for v in self.trainable_variables):,}", self.num_replicas)
        if bfc_may_be_late():
            log_once("TensorFlow had started before kerastrainer was imported, so it may keep malloc as its CPU "
                     "allocator (steps can then fault in fresh pages for their tensors: up to 30% slower on CPU; "
                     "kerastrainer/utils/cpu_allocator.py). Import kerastrainer before the first TensorFlow op, "
                     "or set TF_CPU_ALLOCATOR_USE_BFC=true in the shell.")

    def _make_step_runner(self) -> StepRunner:
        """The standard step: the ``tf.function`` of ``train_function.py``, XLA as the policy decides."""
        devices = replica_devices(self.strategy)
        self.xla.resolve(devices, auto_on_cpu=self.auto_xla_on_cpu)
        one_device = self.num_replicas == 1 and (self.strategy is tf.distribute.get_strategy()
                                                 or isinstance(self.strategy, tf.distribute.OneDeviceStrategy))
        self.xla.choose_region(one_device=one_device, own_reduce=self._own_gradient_reduction())
        if self.outputs_are_latest and not (one_device and self.objectives[0].implicit):
            # its optimizers merge the replicas' gradients inside the step, where XLA cannot go (on one
            # device compile's step is compiled whole, as keras.Model.fit compiles it)
            self.xla.disable("the model updates its variables itself (its own train step), merging the "
                             "replicas' gradients inside it", impossible=not one_device)
        spec = StepSpec(strategy=self.strategy, num_replicas=self.num_replicas, objectives=self.objectives,
                        tower=self.tower_func, source=self.input, average=self.average,
                        global_step=self.global_step_var,
                        reduce_gradients=self._reduce_gradients if self._own_gradient_reduction() else None)
        return FunctionStepRunner(spec, self.xla)

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
        if self.step_runner is not None:
            self.step_runner.disable_xla(reason)
        else:
            self.xla.disable(reason)

    @property
    def trace_seconds(self) -> Optional[float]:
        """The first call: seconds tracing the train function (None before it, or for a graph step)."""
        return getattr(self.step_runner, "trace_seconds", None)

    @property
    def first_call_seconds(self) -> Optional[float]:
        """The first call: seconds running it, XLA's compile included."""
        return getattr(self.step_runner, "first_call_seconds", None)

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

    @property
    def loss_names(self) -> List[str]:
        """The step's own statistics in ``last_step_outputs``: ``['cost']`` for a tower function
        with one cost, the cost names of several, a Keras ``train_step``'s logs (``'loss'`` first)."""
        names = getattr(getattr(self, "tower_func", None), "cost_names", None)
        return ["cost"] if names is None else list(names)

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

    def get_predictor(self, input_names: Sequence[str], output_names: Sequence[str], device: int = 0,
                      is_training: bool = False):
        """A callable numpy -> numpy running the tower in inference mode on the current weights.

        ``device`` is tensorpack's: ``k`` runs on ``/gpu:k`` (the logical CPU device ``k`` on a
        machine without GPUs), ``-1`` on ``/cpu:0``. Example::

            predictors = [trainer.get_predictor(['image'], ['boxes'], device=k) for k in range(ngpu)]
        """
        if isinstance(device, bool) or not isinstance(device, (int, np.integer)):
            raise TypeError(f"get_predictor(device={device!r}): give a device index (k for /gpu:k, -1 for "
                            "/cpu:0), as in tensorpack.")
        dev = tower_device(f"/gpu:{int(device)}") if device >= 0 else "/cpu:0"
        predict = self.tower_func.predict_function(input_names, output_names, is_training=is_training)

        def on_device(*arrays):
            with tf.device(dev):
                return predict(*arrays)

        for attr in ("input_names", "output_names", "concrete_function"):
            setattr(on_device, attr, getattr(predict, attr))
        on_device.device = dev
        return on_device

    def get_tower_predictor(self, tower_func, input_names: Sequence[str], output_names: Sequence[str]):
        """A predictor of another tower function (a ``TowerFunc``, or a function with an
        ``input_signature``) on this trainer's variables: its layers are found by scoped name in the
        layer store (a layer the trainer's tower never made is an error)."""
        fn = getattr(tower_func, "fn", tower_func)
        tower = TowerFunction(fn, tower_func.input_signature, self.layer_store)
        return tower.predict_function(input_names, output_names)

    def sync_counters(self) -> None:
        """Copy the Python counters into the checkpointed variables (before saving)."""
        self.global_step_var.assign(self.global_step)
        self.epoch_var.assign(self.epoch_num if self.local_step >= self.steps_per_epoch else self.epoch_num - 1)

    def _callbacks_max_steps(self) -> Optional[int]:
        return self._callbacks.steps_to_next_trigger() if self._callbacks is not None else None

    def _choose_steps(self) -> int:
        fixed = self.step_runner.fixed_steps_per_call if self.step_runner is not None else None
        if fixed:
            return fixed
        return self.steps.choose(self.steps_per_epoch - self.local_step, self._callbacks_max_steps(),
                                 self.input.requires_feed)

    @property
    def steps_per_call(self) -> Union[str, int]:
        return self.steps.steps_per_call

    def run_step_call(self, k: int) -> Dict[str, float]:
        """Run ``k`` training steps in one call (the fit loop's); the counters and
        ``last_step_outputs`` are updated."""
        return self.loop.run_call(k)

    def setup_callbacks(self, callbacks: Sequence[Callback], monitors: Sequence[Callback]) -> None:
        from ..callbacks.group import Callbacks
        from ..callbacks.monitor_group import Monitors
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
        """The epochs, run by the fit loop (``loop.py``); subclasses wrap it (a default session,
        an agreement between workers)."""
        graph = self._tf1_callback_graph
        if graph is None:
            self.loop.run_epochs(steps_per_epoch, starting_epoch, max_epoch)
            return
        # the callbacks' TF1 graph (tf1_callback_graph_scope) runs in a session of its own, TF1's default
        # session in the main loop (as tensorpack's), so their `tensor.eval(feed_dict)` / `op.run()` work
        with graph.as_default():
            init = tf.compat.v1.variables_initializer(tf.compat.v1.global_variables())
        sess = tf.compat.v1.Session(graph=graph)   # not `with sess:`, which makes its graph the default
        try:
            sess.run(init)
            with tf1_default_session(sess):
                self.loop.run_epochs(steps_per_epoch, starting_epoch, max_epoch)
        finally:
            sess.close()

    _tf1_callback_graph: Optional[tf.Graph] = None

    def tf1_callback_graph_scope(self, callback: Callback, error: Exception):
        """tensorpack set every callback up in its TF1 graph. A program's callback (its ``_setup_graph``
        not kerastrainer's) that builds graph-only TF1 ops there failed eagerly with ``error``
        (``tf.placeholder``: a Horovod evaluator's ``tf.placeholder`` fed to ``hvd.allreduce``, run by
        ``tensor.eval(feed_dict=...)``); it sets up again in a TF1 graph the trainer keeps for such
        callbacks, run in the main loop by a session of that graph (:meth:`main_loop`). Their ops are
        their own: the model's variables are not in that graph."""
        owner = next((k for k in type(callback).__mro__ if "_setup_graph" in k.__dict__), Callback)
        if "eager execution" not in str(error) or owner.__module__.split(".")[0] == "kerastrainer":
            return None
        if self._tf1_callback_graph is None:
            self._tf1_callback_graph = tf.Graph()
        log_once(f"{type(callback).__name__}._setup_graph builds TF1 graph ops ({str(error).splitlines()[0]}): set "
                 "up in a TF1 graph of its own, run by a session that is TF1's default session in the main loop, "
                 "as tensorpack did.")
        return self._tf1_callback_graph.as_default()

    def train(self, callbacks: Sequence[Callback], monitors: Sequence[Callback],
              session_init: Optional[SessionInit], steps_per_epoch: int, starting_epoch: int,
              max_epoch: int) -> None:
        """Set up callbacks, load weights, and run the main loop (the model must be set up)."""
        with launch_contexts(f"{type(self).__name__}.train"), stop_signal_scope(self, setting_up=True):   # a Ctrl-C while loading is raised before step 1
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
