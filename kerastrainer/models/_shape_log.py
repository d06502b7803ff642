"""Layers' input and output shapes, recorded once per layer for the table printed after a build.

Registered layers (:func:`~kerastrainer.models.registry.layer_register`) and functions wrapped
by :func:`~kerastrainer.models.arg_scope.enable_argscope_for_function` both report here.

Example::

    log_layer_shapes_once('conv0', x, y)    # the first call for 'conv0' records a row; later ones do nothing
"""
from __future__ import annotations

import threading
import weakref

import tensorflow as tf

from ..tfutils.layer_store import LayerStore, record_layer_shape
from ..tfutils.tower import current_layer_store, get_current_tower_context
from ..utils import logger

__all__ = ["log_layer_shapes_once", "disable_layer_logging"]

_logged_lock = threading.Lock()
_logged: "weakref.WeakKeyDictionary[LayerStore, set]" = weakref.WeakKeyDictionary()

_logging_disabled = False


def disable_layer_logging() -> None:
    """Stop logging layers' input and output shapes (tensorpack's ``disable_layer_logging``).

    Example::

        disable_layer_logging()
    """
    global _logging_disabled
    _logging_disabled = True


def _logged_keys(store: LayerStore) -> set:
    with _logged_lock:
        keys = _logged.get(store)
        if keys is None:
            keys = set()
            _logged[store] = keys
        return keys


def _shape_str(x) -> str:
    if isinstance(x, (list, tuple)):
        return ",".join(_shape_str(t) for t in x)
    shape = getattr(x, "shape", None)
    if shape is None:
        return type(x).__name__
    try:
        return str(list(tf.TensorShape(shape).as_list()))
    except (ValueError, TypeError):
        return str(shape)


def log_layer_shapes_once(key: str, inputs, outputs) -> None:
    """Record the input and output shapes of layer ``key`` the first time it is built."""
    if _logging_disabled:
        return
    ctx = get_current_tower_context()
    if ctx is not None and not ctx.is_main_training_tower and ctx.is_training:
        return
    keys = _logged_keys(current_layer_store())
    with _logged_lock:
        if key in keys:
            return
        keys.add(key)
    # one table after the model is built (TowerFunction.build), not two lines per layer
    record_layer_shape(current_layer_store(), key, _shape_str(inputs), _shape_str(outputs))
    logger.debug("%s input: %s, output: %s", key, _shape_str(inputs), _shape_str(outputs))
