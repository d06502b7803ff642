"""``tf.compat.v1.disable_eager_execution()`` in a tensorpack program: kerastrainer keeps eager on.

tensorpack ran TF1 graphs, and programs written for it (tensorpack's own unit tests among them,
``callbacks/param_test.py`` at import) switch TF2 to graph mode, process-wide. kerastrainer drives
``tf.function``s eagerly: its trainers, layer store and Keras 3 need eager execution outside
functions. So, once ``kerastrainer.compat`` is loaded (``from kerastrainer import *`` loads it):

- ``tf.compat.v1.disable_eager_execution()`` and ``tf.compat.v1.disable_v2_behavior()`` leave
  eager execution on and log one warning saying so (TF1 graph code of the program's own still runs
  inside ``with tf.Graph().as_default():``, where a ``tfv1.Session`` works as in TF1);
- if the program disabled eager execution before kerastrainer was loaded, TF can no longer switch
  back cleanly (Keras and kerastrainer were imported in graph mode): one line says so, and
  ``launch_train_with_config`` raises a RuntimeError that says how to fix the program (import
  kerastrainer first, or remove the call).

Example::

    from kerastrainer.compat import tfv1 as tf
    tf.disable_eager_execution()     # logs: "... kerastrainer keeps eager execution on ..."
    assert tf.executing_eagerly()
"""
from __future__ import annotations

import threading

import tensorflow as tf

from ..utils import logger

__all__ = ["keep_eager_execution", "eager_execution_disabled"]

_WHY = ("kerastrainer trains with tf.function driven eagerly, so it keeps eager execution on; "
        "TF1 graph code of your own can run inside `with tf.Graph().as_default():` (a tfv1.Session works there)")
_state = {"installed": False, "logged": False}
_lock = threading.Lock()


def eager_execution_disabled() -> bool:
    """Whether eager execution is off process-wide (``tf.compat.v1.disable_eager_execution()``).

    Asked in a fresh thread: a thread starts in the process's default mode, outside any
    ``Graph().as_default()`` block of the caller (graph stacks are per thread)."""
    answer = []
    t = threading.Thread(target=lambda: answer.append(tf.executing_eagerly()), name="kerastrainer-eager-probe")
    t.start()
    t.join()
    return not answer[0]


def _log_once(message: str) -> None:
    with _lock:
        if _state["logged"]:
            return
        _state["logged"] = True
    logger.warning(message)


def _ignoring(name: str):
    def disable(*args, **kwargs):
        _log_once(f"{name}() called: ignored. {_WHY}.")
    disable.__name__ = name.rsplit(".", 1)[-1]
    disable.__doc__ = f"kerastrainer's stand-in for {name}: logs once, keeps eager execution on."
    return disable


def _report_disabled_before_load() -> None:
    # TF can switch back (tf.compat.v1.enable_eager_execution) only before Keras and kerastrainer
    # were imported in graph mode; after that, variables made in tf.functions fail. So: say it.
    if eager_execution_disabled():
        _log_once("tf.compat.v1.disable_eager_execution() was called before kerastrainer was loaded: "
                  "kerastrainer cannot train in this process (launch_train_with_config raises). Import "
                  "kerastrainer first (the call is then logged and ignored), or remove the call.")


def keep_eager_execution() -> None:
    """Install the stand-ins for ``disable_eager_execution`` / ``disable_v2_behavior`` (once) and
    say once that kerastrainer cannot train if eager execution is already off."""
    with _lock:
        first = not _state["installed"]
        _state["installed"] = True
    if first:
        v1 = tf.compat.v1
        for attr in ("disable_eager_execution", "disable_v2_behavior"):
            stand_in = _ignoring(f"tf.compat.v1.{attr}")
            setattr(v1, attr, stand_in)
    _report_disabled_before_load()
