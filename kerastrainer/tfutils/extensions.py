"""The hooks through which a layer above the core (``kerastrainer.compat``: TF1 idioms) reaches it.

The core never imports ``compat/``. It offers these extension points, and ``compat/__init__.py``
registers into them:

- **where a tower is called** (``TowerFunction.__call__``): :func:`tower_contexts` enters every
  context registered with :func:`add_tower_context` (``tfv1.get_variable`` into the layer store);
- **where ``ModelDesc.optimizer()`` is read** (``ModelDesc.get_optimizer``, ``KerasModel.compile``):
  :func:`read_optimizer` / :func:`translate_optimizer` call the functions set with
  :func:`set_optimizer_reader` (a ``tf.compat.v1.train`` optimizer becomes a Keras one);
- **where training is launched** (``launch_train_with_config``): :func:`launch_contexts`
  (training inside a TF1 ``with tf.Graph().as_default():`` block).

A program that never imports ``kerastrainer.compat`` still gets these translations: the packages
named in :data:`EXTENSIONS` are loaded by name (``importlib``, once) the first time a hook is used.
That tuple is the one place the core names compat; no core module imports it.

The learning-rate variable of a translated optimizer (a TF1 ``tf.Variable`` the Keras optimizer
reads through a callable) is kept here too (:func:`set_learning_rate_variable`), so that
``Trainer.get_hyperparam_var('learning_rate')`` finds it without asking compat.
"""
from __future__ import annotations

import importlib
import threading
from contextlib import ExitStack
from typing import Callable, List, Optional

__all__ = ["EXTENSIONS", "add_tower_context", "tower_contexts", "add_launch_context", "launch_contexts",
           "set_optimizer_reader", "read_optimizer", "translate_optimizer", "set_learning_rate_variable",
           "learning_rate_variable"]

# packages that register into these hooks, loaded at the first use of one
EXTENSIONS = ("kerastrainer.compat",)

_lock = threading.Lock()
_loaded = {"done": False}
_tower_contexts: List[Callable] = []
_launch_contexts: List[Callable] = []
_optimizer = {"read": None, "translate": None}


def load_extensions() -> None:
    """Import the packages of :data:`EXTENSIONS` once (they register their hooks when imported)."""
    if _loaded["done"]:
        return
    with _lock:
        if _loaded["done"]:
            return
        _loaded["done"] = True
        for name in EXTENSIONS:
            importlib.import_module(name)


def add_tower_context(factory: Callable) -> None:
    """``factory(layer_store)`` -> a context manager entered around every tower call."""
    if factory not in _tower_contexts:
        _tower_contexts.append(factory)


def tower_contexts(layer_store) -> ExitStack:
    """The registered tower contexts for ``layer_store``, entered (use as ``with``)."""
    load_extensions()
    stack = ExitStack()
    try:
        for factory in _tower_contexts:
            stack.enter_context(factory(layer_store))
    except BaseException:
        stack.close()
        raise
    return stack


def add_launch_context(factory: Callable) -> None:
    """``factory(who)`` -> a context manager entered around ``launch_train_with_config``."""
    if factory not in _launch_contexts:
        _launch_contexts.append(factory)


def launch_contexts(who: str = "launch_train_with_config") -> ExitStack:
    """The registered launch contexts, entered (use as ``with``)."""
    load_extensions()
    stack = ExitStack()
    try:
        for factory in _launch_contexts:
            stack.enter_context(factory(who))
    except BaseException:
        stack.close()
        raise
    return stack


def set_optimizer_reader(read: Callable, translate: Callable) -> None:
    """``read(optimizer_fn, layer_store)`` calls ``ModelDesc.optimizer`` and returns a Keras
    optimizer; ``translate(opt)`` turns a non-Keras optimizer object into one."""
    _optimizer["read"], _optimizer["translate"] = read, translate


def read_optimizer(optimizer_fn: Callable, layer_store):
    """The Keras optimizer of ``ModelDesc.optimizer`` (called once, as the registered reader does)."""
    load_extensions()
    if _optimizer["read"] is not None:
        return _optimizer["read"](optimizer_fn, layer_store)
    return optimizer_fn()


def translate_optimizer(opt):
    """``opt`` as a Keras optimizer (a Keras optimizer is returned as is)."""
    load_extensions()
    if _optimizer["translate"] is not None:
        return _optimizer["translate"](opt)
    return opt


def set_learning_rate_variable(optimizer, variable) -> None:
    """Record the ``tf.Variable`` a (translated) optimizer reads its learning rate from (kept on
    the optimizer, under a name of ours)."""
    optimizer._kerastrainer_lr_variable = variable


def learning_rate_variable(optimizer) -> Optional[object]:
    """The variable recorded by :func:`set_learning_rate_variable`, or None."""
    return getattr(optimizer, "_kerastrainer_lr_variable", None)
