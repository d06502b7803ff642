"""Keras's ``class_weight`` and ``validation_split``, applied to the data as ``fit`` applies them:
class weights become the batches' sample weights (:func:`apply_class_weight`,
:func:`class_weights_of`), and the last fraction of numpy arrays is held out
(:func:`split_validation`).

This module owns those two transformations of the data. Reading ``fit``'s arguments and
deciding when they apply is :mod:`~kerastrainer.keras.fit_arguments`'; the DataFlows of each
kind of data are :mod:`~kerastrainer.keras.batch_flows`'.

Example::

    class_weights_of(np.array([0, 1, 1]), {1: 2.0})                   # [1., 2., 2.]
    (xt, yt, _), (xv, yv, _) = split_validation(x, y, None, 0.2)      # xv = x[int(0.8 * n):]
"""
from __future__ import annotations

import inspect
import math

import keras
import numpy as np
import tensorflow as tf

from ..dataflow.base import ProxyDataFlow, is_dataflow
from .batch_flows import GeneratorFlow, PyDatasetFlow, _is_arrays, _leaves, _map

__all__ = ["class_weights_of", "apply_class_weight", "split_validation"]


def class_weights_of(y, class_weight: dict):
    """Keras's sample weights for ``class_weight`` (numpy): a one-hot ``y`` is its argmax, a
    ``(n, 1)`` column is squeezed, labels are rounded to ints; a class left out weighs 1.

    Example::

        class_weights_of(np.array([0, 1, 1]), {1: 2.0})   # [1., 2., 2.]
    """
    y = np.asarray(y)
    if y.ndim > 1:
        y = np.argmax(y, axis=-1) if y.shape[-1] != 1 else np.squeeze(y, axis=-1)
    labels = np.round(y).astype("int64")
    return np.array([float(class_weight.get(int(c), 1.0)) for c in labels.reshape(-1)],
                    np.float32).reshape(labels.shape)


def _class_weights_tf(y, class_weight: dict) -> tf.Tensor:
    """:func:`class_weights_of` on a tensor (a ``tf.data`` map)."""
    y = tf.convert_to_tensor(y)
    if y.shape.rank is not None and y.shape.rank > 1:
        y = tf.argmax(y, axis=-1) if y.shape[-1] != 1 else tf.squeeze(y, axis=-1)
    labels = tf.cast(tf.round(tf.cast(y, tf.float32)), tf.int64)
    n = max(int(k) for k in class_weight) + 1
    table = np.ones(n, np.float32)
    for k, v in class_weight.items():
        table[int(k)] = float(v)
    in_range = tf.logical_and(labels >= 0, labels < n)
    return tf.where(in_range, tf.gather(tf.constant(table), tf.clip_by_value(labels, 0, n - 1)), 1.0)


class _ClassWeighted(ProxyDataFlow):
    """``(x, y)`` batches -> ``(x, y, class weights of y)``."""

    def __init__(self, ds, class_weight: dict):
        super().__init__(ds)
        self.class_weight = class_weight

    def __iter__(self):
        for dp in self.ds:
            yield _with_class_weights(dp, self.class_weight)


def _with_class_weights(dp, class_weight: dict):
    if not (isinstance(dp, (list, tuple)) and len(dp) == 2):
        raise ValueError("class_weight needs (x, y) batches with one target array (as in Keras); "
                         f"got a datapoint of {len(dp) if hasattr(dp, '__len__') else '?'} components.")
    if isinstance(dp[1], (list, tuple, dict)):
        raise ValueError("class_weight is not supported for a model with several targets (as in Keras): "
                         "give sample_weight instead.")
    return (dp[0], dp[1], class_weights_of(dp[1], class_weight))


def apply_class_weight(data, class_weight: dict):
    """``data`` (any form ``fit`` takes, not numpy arrays) with Keras's class weights as its
    sample weights: a ``tf.data.Dataset`` is mapped, the rest become a DataFlow."""
    if isinstance(data, tf.data.Dataset):
        def add(*e):
            if len(e) != 2 or isinstance(e[1], (tuple, dict)):
                raise ValueError("class_weight needs a dataset of (x, y) batches with one target (as in Keras).")
            return e[0], e[1], _class_weights_tf(e[1], class_weight)
        return data.map(add)
    if isinstance(data, keras.utils.PyDataset):
        return _ClassWeighted(PyDatasetFlow(data), class_weight)
    if is_dataflow(data):
        return _ClassWeighted(data, class_weight)
    if inspect.isgenerator(data) or (hasattr(data, "__next__") and hasattr(data, "__iter__")):
        return _ClassWeighted(GeneratorFlow(data), class_weight)
    raise TypeError(f"class_weight cannot be applied to a {type(data).__name__}.")


def split_validation(x, y, sample_weight, fraction: float):
    """Keras's ``validation_split``: the last ``fraction`` of the samples (taken before any
    shuffling) is the validation data. Returns ``((x, y, sw) for training, (x, y, sw) held out)``.

    Example::

        (xt, yt, _), (xv, yv, _) = split_validation(x, y, None, 0.2)   # xv = x[int(0.8 * n):]
    """
    if not _is_arrays(x):
        raise ValueError("validation_split is only supported for numpy arrays (as in Keras); give "
                         "validation_data for a tf.data.Dataset, a PyDataset, a generator or a DataFlow.")
    n = len(_leaves(x)[0])
    split_at = int(math.floor(n * (1.0 - fraction)))
    if split_at == 0 or split_at == n:
        raise ValueError(f"validation_split={fraction} leaves no training or no validation sample of {n}.")
    head = lambda s: None if s is None else _map(lambda a: np.asarray(a)[:split_at], s)  # noqa: E731
    tail = lambda s: None if s is None else _map(lambda a: np.asarray(a)[split_at:], s)  # noqa: E731
    return (head(x), head(y), head(sample_weight)), (tail(x), tail(y), tail(sample_weight))
