"""Keras 3 optimizers in a custom trainer's TF1 graph: TF1's ``minimize`` / ``apply_gradients``.

tensorpack's custom trainers (GAN's ``GANTrainer``: ``opt.minimize(g_loss, var_list=g_vars,
name='g_op')``) call TF1's optimizer methods while the graph is built. A program that writes the
optimizer the TF2 way (``tf.keras.optimizers.Adam(...)``) gets a Keras 3 optimizer, which has no
``minimize`` and whose ``apply_gradients`` makes unordered assignments in a graph without
automatic control dependencies. While a :class:`~.tf1_graph.TF1Graph` is built (and only then),
a Keras optimizer answers them as a TF1 optimizer does:

- its variables (``iterations``, the slots) are made eagerly, outside the graph, for every
  trainable variable of the graph, the first time it is used (one optimizer may update the
  generator and the critic, as TF1's did; its step counter then counts both updates, as TF1
  Adam's shared ``beta1_power`` did);
- the update is a ``tf.function`` (Keras's own ``apply_gradients``, ordered) called from the graph;
  ``minimize`` / ``apply_gradients`` return that call as an operation named ``name``.

Example (what GAN.py's trainer does)::

    opt = tf.keras.optimizers.Adam(2e-4, beta_1=0.5)
    g_min = opt.minimize(g_loss, var_list=g_vars, name='g_op')    # an op of the TF1 graph
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional

import keras
import tensorflow as tf

from .._internals import keras_optimizer_tf1_methods

__all__ = ["keras_optimizers_as_tf1"]


def _apply_in_graph(opt, grads_and_vars, name: Optional[str]):
    pairs = [(g, v) for g, v in grads_and_vars if g is not None]
    if not pairs:
        raise ValueError(f"{type(opt).__name__}.apply_gradients: no gradient given for any variable.")
    variables = [v for _, v in pairs]
    if not opt.built:
        graph_vars = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)
        known = {id(v) for v in graph_vars}
        with tf.init_scope():
            opt.build(list(graph_vars) + [v for v in variables if id(v) not in known])
    apply = keras_optimizer_tf1_methods.original_apply_gradients

    def update(*grads):
        # Every op of the update waits for the gradients. The call is inlined when it runs, and an op
        # of its body without an input from the gradients (the read of `iterations`) would otherwise
        # start at once: beside an earlier update that the program ordered before this one (GAN's
        # d_min under tf.control_dependencies([g_min])), losing one of two `iterations` increments.
        with tf.control_dependencies(grads):
            apply(opt, list(zip(grads, variables)))
        return tf.constant(True)

    grads = [tf.convert_to_tensor(g) for g, _ in pairs]
    done = tf.function(update, autograph=False)(*grads)
    with tf.control_dependencies([done]):
        return tf.no_op(name=name or "apply_gradients")


def _minimize(opt, loss, global_step=None, var_list=None, name=None, **unused):
    if var_list is None:
        var_list = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)
    var_list = list(var_list)
    grads = tf.gradients(loss, var_list)
    if all(g is None for g in grads):
        raise ValueError(f"{type(opt).__name__}.minimize: no gradient flows from {loss!r} to any of "
                         f"{[getattr(v, 'name', v) for v in var_list]}.")
    op = _apply_in_graph(opt, zip(grads, var_list), name)
    if global_step is not None:
        with tf.control_dependencies([op]):
            return tf.compat.v1.assign_add(global_step, 1).op
    return op


@contextmanager
def keras_optimizers_as_tf1(graph: tf.Graph) -> Iterator[None]:
    """While the block builds ``graph``, Keras optimizers answer TF1's ``minimize`` / ``apply_gradients``
    (in that graph only; elsewhere Keras's own ``apply_gradients``)."""

    def in_graph() -> bool:
        return not tf.executing_eagerly() and tf.compat.v1.get_default_graph() is graph

    def minimize(opt, loss, *args, **kwargs):
        if not in_graph():
            raise AttributeError(f"{type(opt).__name__} (Keras 3) has no minimize(); compute the gradients with "
                                 "tf.GradientTape and call apply_gradients.")
        return _minimize(opt, loss, *args, **kwargs)

    def apply_gradients(opt, grads_and_vars, global_step=None, name=None, **kwargs):
        if not in_graph():
            return keras_optimizer_tf1_methods.original_apply_gradients(opt, grads_and_vars, **kwargs)
        op = _apply_in_graph(opt, grads_and_vars, name)
        if global_step is not None:
            with tf.control_dependencies([op]):
                return tf.compat.v1.assign_add(global_step, 1).op
        return op

    with keras_optimizer_tf1_methods(keras.optimizers.Optimizer, minimize, apply_gradients):
        yield
