"""kerastrainer's work launched from a program in TF1 graph mode runs eagerly, as kerastrainer always does.

Two ways a tensorpack program is in graph mode when it trains:

- it wraps the training in ``with tf.Graph().as_default():`` (TF1's way to start from a clean
  graph): the launch runs eagerly inside the block (``eager_mode``); the block's graph stays empty;
- it called ``tf.compat.v1.disable_eager_execution()`` / ``disable_v2_behavior()`` (process-wide):
  the launch runs with TF2's behaviour for its duration (``eager_execution.tf2_behavior_for``) and
  the program is back in graph mode after, its own graph and settings untouched.

The core enters this context (its launch hook, ``tfutils.extensions.launch_contexts``) in
``launch_train_with_config``, ``Trainer.setup_graph``, ``Trainer.train``, a custom trainer's
``__init__`` and ``OfflinePredictor``.

Example::

    with tf.Graph().as_default():
        launch_train_with_config(config, SimpleTrainer())   # trains eagerly; graph stays empty
"""
from __future__ import annotations

from contextlib import contextmanager

import tensorflow as tf

from .._internals import eager_mode
from ..utils import logger
from .eager_execution import eager_execution_disabled, tf2_behavior_for

__all__ = ["eager_inside_tf1_graph"]


@contextmanager
def eager_inside_tf1_graph(who: str = "launch_train_with_config"):
    """Run the block eagerly when the caller is in TF1 graph mode (a plain ``Graph().as_default()``
    block, or eager execution turned off process-wide); otherwise leave everything as it is."""
    graph = tf.compat.v1.get_default_graph()
    if tf.executing_eagerly() or getattr(graph, "building_function", False):
        yield
        return
    if eager_execution_disabled():
        with tf2_behavior_for(who):
            yield
        return
    logger.info("%s: called inside `with tf.Graph().as_default()`; training runs eagerly "
                "(tf.function) as always in kerastrainer, the TF1 graph is left unused.", who)
    with eager_mode():
        yield
