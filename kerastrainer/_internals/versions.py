"""The fence's version check and its errors: the tested range, the one ``RuntimeWarning`` outside it,
and :class:`InternalsError` for an internal that has moved.

Tested range: TensorFlow 2.21.x with Keras 3.15.x. The installed versions are checked once,
at the first use of a Keras or TF internal (:func:`check_versions`): outside the range a
``RuntimeWarning`` names both versions, once per process. Every other module of the fence
loads Keras and TensorFlow through :func:`_keras` / :func:`_tf` (which check first) and
raises ``_missing(...)`` where a fallback would change results; what each internal is for is
theirs.
"""
from __future__ import annotations

import threading
import warnings
from typing import Optional

__all__ = ["TESTED_TENSORFLOW", "TESTED_KERAS", "InternalsError", "check_versions", "installed_versions"]

TESTED_TENSORFLOW = "2.21"   # major.minor of the tested TensorFlow
TESTED_KERAS = "3.15"        # major.minor of the tested Keras


class InternalsError(RuntimeError):
    """A Keras/TF internal kerastrainer relies on is missing, and going on would change results."""


_checked = {"done": False}
_check_lock = threading.Lock()


def installed_versions():
    """``(TensorFlow version, Keras version)`` as installed."""
    import keras
    import tensorflow as tf
    return tf.__version__, keras.__version__


def _in_range(version: str, tested: str) -> bool:
    return version == tested or version.startswith(tested + ".")


def check_versions() -> None:
    """Warn once (``RuntimeWarning``) when TensorFlow or Keras is outside the tested range."""
    if _checked["done"]:
        return
    with _check_lock:
        if _checked["done"]:
            return
        _checked["done"] = True
        tf_v, keras_v = installed_versions()
        if not (_in_range(tf_v, TESTED_TENSORFLOW) and _in_range(keras_v, TESTED_KERAS)):
            warnings.warn(
                f"kerastrainer is tested with TensorFlow {TESTED_TENSORFLOW}.x and Keras {TESTED_KERAS}.x; found "
                f"TensorFlow {tf_v} and Keras {keras_v}. It relies on a few of their internals "
                "(kerastrainer/_internals/); where one has moved it raises rather than change results.",
                RuntimeWarning, stacklevel=3)


def _missing(internal: str, consequence: str, error: Optional[BaseException] = None) -> InternalsError:
    try:
        tf_v, keras_v = installed_versions()
    except Exception:  # noqa: BLE001 - the message still names the internal
        tf_v = keras_v = "?"
    detail = f" ({type(error).__name__}: {error})" if error is not None else ""
    return InternalsError(
        f"kerastrainer needs the internal {internal}, which TensorFlow {tf_v} / Keras {keras_v} does not "
        f"have{detail}. Without it {consequence}, so kerastrainer stops rather than go on. It is tested with "
        f"TensorFlow {TESTED_TENSORFLOW}.x and Keras {TESTED_KERAS}.x: install versions in that range.")


def _keras():
    check_versions()
    import keras
    return keras


def _tf(patching_v1: bool = False):
    check_versions()
    import tensorflow as tf
    if patching_v1:
        # the first `import tensorflow.compat.v1` makes a new module object and rebinds tf.compat.v1 to
        # it: made before any patch of tf.compat.v1, so that a program's later import sees the patches
        # (only then: the module's presence tells the TF1 layer that a program uses TF1's API)
        import tensorflow.compat.v1  # noqa: F401
    return tf
