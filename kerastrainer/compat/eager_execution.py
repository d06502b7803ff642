"""Whether a program turned eager execution off, and kerastrainer's own work run eagerly in it.

tensorpack ran TF1 graphs, and programs written for it (tensorpack's unit tests, TFLMS's Session
tutorial, inference scripts) call ``tf.compat.v1.disable_eager_execution()`` or
``disable_v2_behavior()``: their placeholders, ``tf.Session`` and ``sess.run`` need graph mode.
kerastrainer leaves both calls as TensorFlow made them, so the program's TF1 code runs as on plain
TF 2.21. kerastrainer's own work (set-up, the ``tf.function`` step, its input threads) needs TF2's
behaviour; :func:`tf2_behavior_for` runs it with TF2's behaviour for its duration and gives the
program back its own after (eager off, TF1 shapes, reference variables, as it set them).

The switch is process-wide while it lasts (the default mode of new threads is one flag for the
process): a thread of the program's that starts during a training starts eager.

Example::

    import tensorflow.compat.v1 as tf
    tf.disable_v2_behavior()
    from kerastrainer import *
    x = tf.placeholder(tf.float32, [None, 3])        # graph mode, as the program asked
    launch_train_with_config(config, SimpleTrainer())  # trains with TF2 behaviour, eagerly driven
    assert not tf.executing_eagerly()                # and the program is back in graph mode
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

from .._internals import eager_is_process_default, tf2_behavior_in_block
from ..utils import logger

__all__ = ["eager_execution_disabled", "tf2_behavior_for"]

_logged = set()
_lock = threading.Lock()


def eager_execution_disabled() -> bool:
    """Whether eager execution is off process-wide (``tf.compat.v1.disable_eager_execution()`` or
    ``disable_v2_behavior()``), whatever ``Graph().as_default()`` block the caller is in."""
    return not eager_is_process_default()


def _log_once(who: str) -> None:
    with _lock:
        if who in _logged:
            return
        _logged.add(who)
    logger.info("%s: eager execution is off in this program (tf.compat.v1.disable_eager_execution() or "
                "disable_v2_behavior()); kerastrainer runs this call with TF2's behaviour and gives the "
                "program its graph mode back after.", who)


@contextmanager
def tf2_behavior_for(who: str) -> Iterator[None]:
    """Run the block (kerastrainer's own work, named ``who`` in one log line) eagerly with TF2's
    behaviour when the program turned eager execution off; restore the program's mode after."""
    _log_once(who)
    with tf2_behavior_in_block():
        yield
