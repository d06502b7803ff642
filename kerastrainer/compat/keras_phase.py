"""Keras layers called inside a tower function, and tensorpack's ``KerasPhaseCallback``.

Keras 2 read a global learning phase (``KerasPhaseCallback(True)`` set it for training).
Keras 3 has none: a layer trains when its call gets ``training=True``. A tower function
that calls a Keras model without ``training=`` (tensorpack's mnist-keras) therefore
runs it in its tower's mode: :func:`keras_training_phase` gives every Keras call made in
the tower the tower's ``is_training`` unless the call passes its own, so Dropout drops
and BatchNormalization updates its moving statistics in training towers only.
"""
from __future__ import annotations

from contextlib import contextmanager

__all__ = ["keras_training_phase"]

try:  # Keras 3's per-thread call context (what an outer layer passes to inner layers)
    from keras.src.backend.common import global_state as _keras_state
    from keras.src.layers.layer import CallContext as _CallContext
except ImportError:  # pragma: no cover - another Keras layout: calls keep Keras's defaults
    _keras_state = _CallContext = None


@contextmanager
def keras_training_phase(training: bool):
    """Keras layers called in this block without ``training=`` get ``training``."""
    if _keras_state is None or _keras_state.get_global_attribute("current_call_ctx") is not None:
        yield  # already inside a Keras call: its own context decides
        return
    ctx = _CallContext(entry_layer=None)
    ctx.training = bool(training)
    _keras_state.set_global_attribute("current_call_ctx", ctx)
    try:
        yield
    finally:
        _keras_state.set_global_attribute("current_call_ctx", None)
