"""``ModelDesc.optimizer()`` returning a ``tf.compat.v1.train`` optimizer: translated to Keras 3.

``optimizer()`` is called eagerly; its variables (``tfv1.get_variable('learning_rate')``)
live in the model's layer store. If it fails eagerly because its TF1 code needs graph mode
(``tfv1.summary.scalar`` of an ``exponential_decay`` schedule, say), it is called again
inside a graph function, as TF1 ran it. A ``tfv1.train`` optimizer is then replaced by the
Keras 3 optimizer with the same update rule; its learning rate becomes

- a float: the Keras optimizer's own variable;
- a variable (tensorpack's ``learning_rate`` idiom): read by the optimizer every step, and
  set by ``ScheduledHyperParamSetter('learning_rate', ...)``;
- a ``tfv1.train`` schedule of the global step (``exponential_decay``,
  ``piecewise_constant``, ...): the Keras 3 schedule of the same name and arguments,
  evaluated each step on the in-graph global step;
- any other expression of the global step (graph mode): the traced expression, evaluated
  each step (the same ops as TF1).

Every translation is logged once.
"""
from __future__ import annotations

import functools
from typing import Callable, Optional

import keras
import tensorflow as tf
from keras import ops

from .._internals import optimizer_variable_index, rmsprop_velocities, tf1_optimizer_settings
from ..tfutils.extensions import learning_rate_variable, set_learning_rate_variable
from ..tfutils.global_step import active_store
from ..tfutils.layer_store import LayerStore
from ..tfutils.objective import is_objective_list
from ..tfutils.optimizer import (AccumGradOptimizer, GradientProcessedOptimizer, PendingAccumGrad, PostProcessOptimizer,
                                 ProxyOptimizer, innermost_optimizer, install_processors)
from ..tfutils.proxy_optimizer import KerasPostProcess
from ..utils import logger
from .variables import tf1_variables_in_store

__all__ = ["call_optimizer", "translate_optimizer", "learning_rate_variable", "MomentumV1", "RMSPropV1"]

_logged = set()


def _log_once(msg: str) -> None:
    if msg not in _logged:
        _logged.add(msg)
        logger.info(msg)


class MomentumV1(keras.optimizers.SGD):
    """``tf.compat.v1.train.MomentumOptimizer``'s update rule as a Keras 3 optimizer.

    TF1 keeps the learning rate out of the accumulator (``a = m * a + g; w -= lr * a``), so a
    learning-rate change takes effect at once; Keras's SGD folds it into the velocity.

    Example::

        opt = MomentumV1(0.1, momentum=0.9, nesterov=True)
    """

    def update_step(self, gradient, variable, learning_rate):
        lr = ops.cast(learning_rate, variable.dtype)
        g = ops.cast(gradient, variable.dtype)
        if self.momentum == 0:
            self.assign_sub(variable, ops.multiply(g, lr))
            return
        acc = self.momentums[optimizer_variable_index(self, variable)]
        m = ops.cast(self.momentum, variable.dtype)
        self.assign(acc, ops.add(ops.multiply(acc, m), g))
        step = ops.add(g, ops.multiply(acc, m)) if self.nesterov else acc
        self.assign_sub(variable, ops.multiply(step, lr))


class RMSPropV1(keras.optimizers.RMSprop):
    """``tf.compat.v1.train.RMSPropOptimizer``: Keras's RMSprop with the mean square started at 1.

    Example::

        opt = RMSPropV1(1e-3, rho=0.9, epsilon=1e-10)
    """

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        for v in rmsprop_velocities(self):
            if v is not None:
                v.assign(ops.ones_like(v))


def _tf1_optimizer_classes():
    t = tf.compat.v1.train
    return {
        t.GradientDescentOptimizer: "GradientDescentOptimizer", t.MomentumOptimizer: "MomentumOptimizer",
        t.AdamOptimizer: "AdamOptimizer", t.RMSPropOptimizer: "RMSPropOptimizer",
        t.AdagradOptimizer: "AdagradOptimizer", t.AdadeltaOptimizer: "AdadeltaOptimizer",
    }


def _translate(opt, lr) -> keras.optimizers.Optimizer:
    kind = _tf1_optimizer_classes().get(type(opt))
    if kind is None:
        raise TypeError(
            f"optimizer() returned {type(opt).__module__}.{type(opt).__name__}, which kerastrainer "
            "cannot translate (it translates tf.compat.v1.train's GradientDescent, Momentum, Adam, "
            "RMSProp, Adagrad and Adadelta optimizers). Return a keras.optimizers optimizer instead.")
    a = tf1_optimizer_settings(opt)
    if a.get("use_locking", False):
        logger.warning("optimizer(): %s(use_locking=True) has no meaning in TF2 and is ignored.", kind)
    if kind == "GradientDescentOptimizer":
        return keras.optimizers.SGD(lr), "keras.optimizers.SGD"
    if kind == "MomentumOptimizer":
        return (MomentumV1(lr, momentum=float(a["momentum"]), nesterov=bool(a["use_nesterov"])),
                f"kerastrainer.compat.MomentumV1(momentum={a['momentum']}, nesterov={a['use_nesterov']})")
    if kind == "AdamOptimizer":
        return (keras.optimizers.Adam(lr, beta_1=float(a["beta1"]), beta_2=float(a["beta2"]),
                                      epsilon=float(a["epsilon"])),
                f"keras.optimizers.Adam(beta_1={a['beta1']}, beta_2={a['beta2']}, epsilon={a['epsilon']})")
    if kind == "RMSPropOptimizer":
        return (RMSPropV1(lr, rho=float(a["decay"]), momentum=float(a["momentum"]),
                          epsilon=float(a["epsilon"]), centered=bool(a["centered"])),
                f"kerastrainer.compat.RMSPropV1(rho={a['decay']}, momentum={a['momentum']}, "
                f"epsilon={a['epsilon']}, centered={a['centered']})")
    if kind == "AdagradOptimizer":
        # TF1 Adagrad has no epsilon: lr * g / sqrt(accumulator)
        return (keras.optimizers.Adagrad(lr, initial_accumulator_value=float(a["initial_accumulator_value"]),
                                         epsilon=0.0),
                f"keras.optimizers.Adagrad(initial_accumulator_value={a['initial_accumulator_value']}, epsilon=0)")
    return (keras.optimizers.Adadelta(lr, rho=float(a["rho"]), epsilon=float(a["epsilon"])),
            f"keras.optimizers.Adadelta(rho={a['rho']}, epsilon={a['epsilon']})")


_SCHEDULES = ("ExponentialDecay", "PiecewiseConstantDecay", "PolynomialDecay", "InverseTimeDecay",
              "CosineDecay", "CosineDecayRestarts")


def _plain(v):
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if tf.is_tensor(v) and hasattr(v, "numpy"):
        return v.numpy().item()
    return v


def _keras_schedule(tf1_schedule):
    """The Keras 3 schedule with the same class and arguments (else the TF1 object itself)."""
    name = type(tf1_schedule).__name__
    if name in _SCHEDULES:
        try:
            cfg = {k: _plain(v) for k, v in tf1_schedule.get_config().items() if v is not None}
            return getattr(keras.optimizers.schedules, name).from_config(cfg), f"keras.optimizers.schedules.{name}"
        except (TypeError, ValueError, AttributeError):
            pass
    return tf1_schedule, f"the TF1 schedule {name}"


def _tf1_learning_rate(opt):
    settings = tf1_optimizer_settings(opt)
    for attr in ("lr", "learning_rate"):
        if attr in settings:
            return settings[attr]
    raise TypeError(f"Cannot find the learning rate of {type(opt).__name__}")


def translate_optimizer(opt, lr_function: Optional[Callable] = None) -> keras.optimizers.Optimizer:
    """The Keras 3 optimizer for a ``tf.compat.v1.train`` optimizer (a Keras one is returned as is).

    ``lr_function``, when the TF1 learning rate was a graph tensor, evaluates it (see
    :func:`call_optimizer`).
    """
    if isinstance(opt, keras.optimizers.Optimizer):
        return opt
    if not isinstance(opt, tf.compat.v1.train.Optimizer):
        raise TypeError(f"optimizer() must return a Keras optimizer (or a tf.compat.v1.train optimizer); "
                        f"got {type(opt).__name__}")
    lr = _tf1_learning_rate(opt)
    if isinstance(lr, tf.Variable):
        var = lr
        lr_arg, lr_desc = (lambda: var.read_value()), f"the variable '{var.name.split(':')[0]}'"
    elif isinstance(lr, (int, float)) or (tf.is_tensor(lr) and hasattr(lr, "numpy")):
        lr_arg, lr_desc = float(lr), f"{float(lr):g}"
    elif lr_function is not None:
        lr_arg, lr_desc = lr_function, f"the graph of '{lr.name.split(':')[0]}' (a function of the global step)"
    elif isinstance(lr, functools.partial) and len(lr.args) == 1:
        # an eager tfv1.train schedule: functools.partial(<TF1 schedule>, global_step)
        sched, desc = _keras_schedule(lr.func)
        step = lr.args[0]
        lr_arg, lr_desc = (lambda: sched(step)), f"{desc} of '{getattr(step, 'name', 'the global step')}'"
    elif callable(lr):
        lr_arg, lr_desc = lr, "a callable"
    else:
        raise TypeError(f"Cannot translate the learning rate {lr!r} of {type(opt).__name__}.")
    kopt, desc = _translate(opt, lr_arg)
    if isinstance(lr, tf.Variable):
        # The Keras optimizer only sees a callable; keep the variable so that callbacks
        # (ScheduledHyperParamSetter('learning_rate')) find it even when it lives outside the
        # model, e.g. made at the top of a KerasModel program rather than in optimizer().
        set_learning_rate_variable(kopt, lr)
    _log_once(f"optimizer(): tf.compat.v1.train.{type(opt).__name__} translated to {desc} "
              f"with learning rate {lr_desc}, same update rule.")
    return kopt


def call_optimizer(fn: Callable, store: LayerStore) -> keras.optimizers.Optimizer:
    """Call ``ModelDesc.optimizer`` and translate the result (see the module's docstring).

    Variables it creates are made eagerly, once: ``tfv1.get_variable`` ones in ``store``.
    """
    allow = store.allow_create
    store.allow_create = True
    try:
        with active_store(store), tf1_variables_in_store(store):
            try:
                opt = fn()
                lr_function = None
            except Exception as eager_error:  # noqa: BLE001 - retried in graph mode, else re-raised
                try:
                    opt, lr_function = _call_in_graph_mode(fn, store)
                except Exception:
                    raise eager_error from None
            else:
                if _computed_learning_rate(opt):
                    # `MomentumOptimizer(lr / 8.)`, a warm-up `tf.where(global_step < w, ...)`: evaluated
                    # eagerly it is one number; TF1 computed it every step. Traced, it is recomputed.
                    opt, lr_function = _call_in_graph_mode(fn, store, "its learning rate is a tensor computed "
                                                                      "from variables or the global step")
    finally:
        store.allow_create = allow
    if is_objective_list(opt):   # a step with several costs: each objective's optimizer translated
        if lr_function is not None:
            raise TypeError("optimizer() returned Objectives whose learning rate is computed in graph mode "
                            "(from the global step): give each optimizer a float learning rate and set it "
                            "with ScheduledHyperParamSetter('<objective name>/learning_rate', ...).")
        return [o.with_optimizer(_keras_optimizer(o.optimizer, None, store)) for o in opt]
    return _keras_optimizer(opt, lr_function, store)


def _keras_optimizer(opt, lr_function, store: LayerStore) -> keras.optimizers.Optimizer:
    # the wrappers are unwrapped from the outside in: processors around an accumulation run on each
    # step's gradients, processors inside it on the accumulated sums (tensorpack's order)
    if isinstance(opt, PendingAccumGrad):
        kopt = AccumGradOptimizer(_keras_optimizer(opt.opt, lr_function, store), opt.niter)
        _log_once(f"optimizer(): AccumGradOptimizer applies the sum of every {opt.niter} steps' gradients.")
        return kopt
    if isinstance(opt, ProxyOptimizer):
        overridden = [m for m in ("compute_gradients", "apply_gradients")
                      if getattr(type(opt), m) not in (getattr(ProxyOptimizer, m), getattr(PostProcessOptimizer, m))]
        if overridden:
            raise TypeError(f"optimizer() returned {type(opt).__name__}, whose own {', '.join(overridden)} is TF1 "
                            "graph code that a Keras 3 update cannot run: use it in a custom trainer's TF1 graph, "
                            "or transform the gradients with apply_grad_processors(opt, [gradproc...]).")
        kopt = _keras_optimizer(opt.wrapped, lr_function, store)
        if isinstance(opt, PostProcessOptimizer):
            _log_once(f"optimizer(): {type(opt).__name__}'s function runs on the variables after each update.")
            return KerasPostProcess(kopt, opt, store.named_variables)
        return kopt
    if isinstance(opt, GradientProcessedOptimizer):
        kopt = _keras_optimizer(opt.opt, lr_function, store)
        install_processors(kopt, opt.procs, store.named_variables)
        _log_once("optimizer(): gradient processors %s run before each update."
                  % ", ".join(type(p).__name__ for p in opt.procs))
        return kopt
    return translate_optimizer(opt, lr_function)


def _computed_learning_rate(opt) -> bool:
    """Whether a TF1 optimizer's learning rate is a tensor computed eagerly (not a number or a variable)."""
    inner = innermost_optimizer(opt)
    if not isinstance(inner, tf.compat.v1.train.Optimizer):
        return False
    try:
        lr = _tf1_learning_rate(inner)
    except TypeError:
        return False
    return tf.is_tensor(lr) and not isinstance(lr, tf.Variable) and not hasattr(lr, "assign")


def _call_in_graph_mode(fn: Callable, store: LayerStore, why: str = "it failed eagerly"):
    box = {}

    def create_eagerly(next_creator, **kwargs):
        with tf.init_scope():
            return next_creator(**kwargs)

    def trace():
        with tf.variable_creator_scope(create_eagerly), tf1_variables_in_store(store):
            opt = fn()
        box["opt"] = opt
        inner = innermost_optimizer(opt)
        lr = _tf1_learning_rate(inner) if isinstance(inner, tf.compat.v1.train.Optimizer) else None
        if tf.is_tensor(lr) and not isinstance(lr, tf.Variable) and not hasattr(lr, "numpy"):
            box["graph_lr"] = True
            return tf.cast(lr, tf.float32)
        return tf.constant(0.0)

    concrete = tf.function(trace, autograph=False).get_concrete_function()
    _log_once(f"optimizer() needs TF1 graph mode ({why}); it was called in a graph function"
              + (", and its learning rate is computed again at every step." if box.get("graph_lr") else "."))
    return box["opt"], ((lambda: concrete()) if box.get("graph_lr") else None)
