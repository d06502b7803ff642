"""Weight regularization for tower functions, as in tensorpack.

``regularize_cost(regex, func)`` sums ``func(var)`` over the trainable variables of
the current tower's layer store whose name (``'group0/block0/conv1/W'``) matches
``regex`` (``re.search``), plus, by default, the penalties of Keras weight
regularizers (``kernel_regularizer=...`` on a layer). In an inference tower it is 0.

Example::

    wd_cost = regularize_cost('.*/W', l2_regularizer(1e-4))
    total_cost = tf.add_n([cost, wd_cost], name='total_cost')

Do not add ``regularize_cost_from_collection()`` to a ``regularize_cost`` that
already includes the layers' own penalties (the default), or they count twice.
"""
from __future__ import annotations

import re
import threading
from typing import Callable, Optional

import numpy as np
import tensorflow as tf

from ..tfutils.tower import current_layer_store, get_current_tower_context
from ..utils import logger
from .dropout import Dropout  # tensorpack's path of Dropout (its own module here)

__all__ = ["regularize_cost", "regularize_cost_from_collection", "l2_regularizer", "l1_regularizer", "Dropout"]

_logged_lock = threading.Lock()
_logged_messages = set()


def _log_once(msg: str, details: Optional[str] = None) -> None:
    """``msg`` at INFO once; ``details`` (e.g. every matched name) at DEBUG."""
    with _logged_lock:
        if msg in _logged_messages:
            return
        _logged_messages.add(msg)
    logger.info(msg)
    if details:
        logger.debug(details)


def l2_regularizer(scale: float) -> Callable:
    """``v -> scale * sum(v**2) / 2`` (``tf.nn.l2_loss``, like TF1's l2_regularizer).

    Example::

        wd = regularize_cost('.*/W', l2_regularizer(5e-4))
    """
    scale = float(scale)
    if scale < 0:
        raise ValueError(f"l2_regularizer: scale must be >= 0, got {scale}.")
    return lambda v: scale * tf.nn.l2_loss(tf.cast(v, tf.float32))


def l1_regularizer(scale: float) -> Callable:
    """``v -> scale * sum(|v|)``.

    Example::

        l1 = regularize_cost('fc.*/W', l1_regularizer(1e-5))
    """
    scale = float(scale)
    if scale < 0:
        raise ValueError(f"l1_regularizer: scale must be >= 0, got {scale}.")
    return lambda v: scale * tf.reduce_sum(tf.abs(tf.cast(v, tf.float32)))


def _layer_weight_penalties(store):
    """Penalties of Keras weight regularizers (``kernel_regularizer=...``) in the store.

    Computed from the variables here rather than read from ``layer.losses``, whose
    activity-loss tensors belong to whichever trace called the layer last.
    """
    penalties = []
    for layer in store.layers.values():
        for v in getattr(layer, "trainable_weights", []):
            reg = getattr(v, "regularizer", None)
            if reg is not None:
                penalties.append(tf.cast(reg(v), tf.float32))
    return penalties


def _in_inference_tower() -> bool:
    ctx = get_current_tower_context()
    return ctx is not None and not ctx.is_training


def regularize_cost(regex: str, func: Callable, name: str = "regularize_cost",
                    include_layer_losses: bool = True) -> tf.Tensor:
    """Sum of ``func(v)`` over trainable store variables whose name matches ``regex``.

    Args:
        regex: searched (``re.search``) in names like ``'conv0/W'``, ``'fc/b'``.
        func: variable -> scalar tensor, e.g. :func:`l2_regularizer`.
        name: the name of the returned scalar.
        include_layer_losses: also add Keras weight regularizers' penalties.

    Returns a float32 scalar; 0 in an inference tower or when nothing matches. The
    matched names are logged once.

    Example::

        wd = regularize_cost('.*/W', l2_regularizer(1e-4))
    """
    if not isinstance(regex, str) or not regex:
        raise ValueError(f"regularize_cost: regex must be a non-empty string, got {regex!r}.")
    if not callable(func):
        raise TypeError(f"regularize_cost: func must be callable (e.g. l2_regularizer(1e-4)), "
                        f"got {type(func).__name__}.")
    try:
        pattern = re.compile(regex)
    except re.error as e:
        raise ValueError(f"regularize_cost: invalid regex {regex!r}: {e}") from None
    if _in_inference_tower():
        return tf.constant(0.0, dtype=tf.float32, name=name)
    store = current_layer_store()
    matched, costs = [], []
    for vname, v in store.named_variables().items():
        if v.trainable and pattern.search(vname):
            matched.append(vname)
            costs.append(tf.cast(func(v), tf.float32))
    if include_layer_losses:
        costs.extend(_layer_weight_penalties(store))
    n_params = sum(int(np.prod(store.named_variables()[m].shape)) for m in matched)
    _log_once(f"regularize_cost({regex!r}) regularizes {len(matched)} variables ({n_params:,} parameters)"
              + ("" if matched else ": none matches; names look like " + ", ".join(list(store.named_variables())[:3])),
              details=f"regularize_cost({regex!r}) matches: {', '.join(matched)}" if matched else None)
    if not costs:
        return tf.constant(0.0, dtype=tf.float32, name=name)
    return tf.add_n(costs, name=name)


def regularize_cost_from_collection(name: str = "regularization_loss") -> tf.Tensor:
    """Sum of the Keras weight regularizers' penalties of the layers in the store.

    tensorpack's equivalent summed TF1's REGULARIZATION_LOSSES collection, where
    ``kernel_regularizer`` penalties went. 0 in an inference tower.

    Example::

        x = Conv2D('conv0', x, 32, 3, kernel_regularizer=keras.regularizers.L2(1e-4))
        cost = cost + regularize_cost_from_collection()
    """
    if _in_inference_tower():
        return tf.constant(0.0, dtype=tf.float32, name=name)
    costs = _layer_weight_penalties(current_layer_store())
    if not costs:
        return tf.constant(0.0, dtype=tf.float32, name=name)
    return tf.add_n(costs, name=name)
