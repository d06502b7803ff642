"""A tensorpack program may wrap its training in ``with tf.Graph().as_default():`` (TF1's way to
start from a clean graph). kerastrainer's loop drives ``tf.function``s eagerly, so the
launcher trains in eager mode inside such a block; the block's graph stays empty. When eager
execution was turned off process-wide before kerastrainer was loaded (eager_execution.py), the launch
raises a RuntimeError saying so: kerastrainer's threads would start in graph mode."""
from __future__ import annotations

from contextlib import contextmanager

import tensorflow as tf

from .._internals import eager_mode
from ..utils import logger
from .eager_execution import eager_execution_disabled

__all__ = ["eager_inside_tf1_graph"]


@contextmanager
def eager_inside_tf1_graph(who: str = "launch_train_with_config"):
    """Run the block eagerly when the caller sits in a plain TF1 ``Graph().as_default()``."""
    graph = tf.compat.v1.get_default_graph()
    if tf.executing_eagerly() or getattr(graph, "building_function", False):
        yield
        return
    if eager_execution_disabled():   # and TF refused to turn it back on (compat/eager_execution.py)
        # kerastrainer's own threads (input producers, prefetchers) would start in graph mode
        raise RuntimeError(
            f"{who}: eager execution is disabled process-wide (tf.compat.v1.disable_eager_execution() ran "
            "before kerastrainer was loaded; TF cannot switch back cleanly once Keras was imported). kerastrainer "
            "trains with tf.function driven eagerly: remove the call, or import kerastrainer first (then the "
            "call is logged and ignored), and put TF1 graph code inside `with tf.Graph().as_default():`.")
    logger.info("%s: called inside `with tf.Graph().as_default()`; training runs eagerly "
                "(tf.function) as always in kerastrainer, the TF1 graph is left unused.", who)
    with eager_mode():
        yield
