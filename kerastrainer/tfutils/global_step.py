"""The global step registry: one step variable per layer store, the trainer's step counter;
``get_global_step_var`` (tensorpack's name) reads it inside a tower and in ``optimizer()``.

Each model's layer store owns one int64 step variable. A trainer adopts it as its
``global_step`` (saved in checkpoints) and increments it in-graph after every step of
its multi-step loop, so an expression of it in ``build_graph`` (a weight-decay
schedule) or in ``optimizer()`` (a learning-rate schedule) moves during training, as
in tensorpack.

Example::

    def build_graph(self, image, label):
        wd = tfv1.train.exponential_decay(2e-4, get_global_step_var(), 480000, 0.2, True)
        ...
"""
from __future__ import annotations

import threading
import weakref
from contextlib import contextmanager
from typing import Optional

import tensorflow as tf

from ..utils import logger
from .tower import current_layer_store, get_current_tower_context

__all__ = ["get_global_step_var", "get_global_step_value", "global_step_of", "active_store",
           "set_current_global_step"]

_steps: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # LayerStore -> tf.Variable
_lock = threading.Lock()
_local = threading.local()
_current: Optional[tf.Variable] = None  # the step of the trainer set up last (for callbacks)
_logged = False


def global_step_of(store) -> tf.Variable:
    """The step variable of ``store``, created (eagerly, in the current strategy scope) once."""
    with _lock:
        var = _steps.get(store)
        if var is None:
            with tf.init_scope():
                var = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                                  aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
            _steps[store] = var
        return var


def set_current_global_step(var: tf.Variable) -> None:
    """Called by trainers: the step that ``get_global_step_var()`` returns outside any tower."""
    global _current
    _current = var


@contextmanager
def active_store(store):
    """Make ``store`` the one ``get_global_step_var()`` uses outside a tower (in ``optimizer()``)."""
    prev = getattr(_local, "store", None)
    _local.store = store
    try:
        yield store
    finally:
        _local.store = prev


def get_global_step_var() -> tf.Variable:
    """The global step as an int64 ``tf.Variable``: the number of training steps done.

    In a tower function and in ``optimizer()`` it is the model's step, which the trainer
    increments in-graph after each step; in a callback it is the running trainer's.
    """
    global _logged
    store = None
    if get_current_tower_context() is None:  # outside a tower: optimizer()'s store, else the trainer's step
        store = getattr(_local, "store", None)
        if store is None and _current is not None:
            return _current
    var = global_step_of(store if store is not None else current_layer_store())
    if not _logged:
        _logged = True
        logger.info("get_global_step_var(): the trainer's step counter, incremented in-graph after "
                    "every training step (tensorpack's global_step).")
    return var


def get_global_step_value() -> int:
    """The global step as a Python int (read eagerly; in a tower function use the variable)."""
    var = get_global_step_var()
    if not tf.executing_eagerly():
        raise RuntimeError("get_global_step_value() reads the step eagerly; inside a tower function "
                           "use get_global_step_var() instead.")
    return int(var.numpy())
