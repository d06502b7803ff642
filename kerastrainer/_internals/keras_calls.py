"""Keras internals around a call: the training phase and the seed generator of a tower's Keras
calls, and how Keras scales losses over replicas.

This module owns what Keras keeps in ``keras.src``'s per-thread global state (the call context,
the seed generator) and its per-replica loss scaling (``keras_losses_scaled_by``: a replica's
share of the batch in place of ``1 / replicas``; ``keras_forward_losses_unscaled``: a layer's Keras
loss divided once, not twice). Private attributes of Keras objects are
``keras_objects.py``'s; the version check is ``versions.py``'s.
"""
from __future__ import annotations

import functools
import threading
from contextlib import contextmanager
from typing import Callable

from .versions import _keras, _missing, _tf

__all__ = ["keras_training_phase", "with_keras_random_state", "keras_forward_losses_unscaled",
           "keras_losses_scaled_by"]


def _keras_global_state():
    # Keras 3 keeps its per-thread call context and seed generator in keras.src's global_state;
    # no public API sets either
    from keras.src.backend.common import global_state
    return global_state


@contextmanager
def keras_training_phase(training: bool):
    """Keras layers called in this block without ``training=`` get ``training``.

    Keras 3 has no global learning phase; its per-thread ``CallContext`` (what an outer layer
    passes to inner ones) is the only way to give calls made outside a layer a default.
    Raises :class:`InternalsError` when Keras moved it (Dropout and BatchNorm in towers would
    stop following ``is_training``).
    """
    _keras()
    try:
        state = _keras_global_state()
        from keras.src.layers.layer import CallContext
    except ImportError as e:
        raise _missing("keras.src.layers.layer.CallContext (Keras's per-thread call context)",
                       "Keras layers called in a tower without training= (Dropout, BatchNormalization) would "
                       "not follow the tower's is_training", e) from e
    if state.get_global_attribute("current_call_ctx") is not None:
        yield  # already inside a Keras call: its own context decides
        return
    ctx = CallContext(entry_layer=None)
    ctx.training = bool(training)
    state.set_global_attribute("current_call_ctx", ctx)
    try:
        yield
    finally:
        state.set_global_attribute("current_call_ctx", None)


def with_keras_random_state(fn: Callable) -> Callable:
    """``fn``, run in any thread with the calling thread's Keras global seed generator.

    Keras keeps its global SeedGenerator per thread in keras.src's global state (no public
    accessor), and ``tf.distribute`` traces each replica in a thread of its own. Without the
    generator (or without the internal: Keras's own behaviour, which works or fails loudly)
    ``fn`` is returned unchanged.
    """
    _keras()
    try:
        state = _keras_global_state()
        from keras.src.random.seed_generator import GLOBAL_SEED_GENERATOR as name
    except ImportError:  # another Keras layout: replicas keep Keras's own behaviour (no silent change)
        return fn
    gen = state.get_global_attribute(name)
    if gen is None:
        return fn

    @functools.wraps(fn)
    def run(*args, **kwargs):
        if state.get_global_attribute(name) is not None:  # this thread has its own
            return fn(*args, **kwargs)
        state.set_global_attribute(name, gen)
        try:
            return fn(*args, **kwargs)
        finally:
            state.set_global_attribute(name, None)
    return run


_per_replica = threading.local()
_per_replica_patch = {"done": False}
_per_replica_lock = threading.Lock()


def _is_one(factor) -> bool:
    return isinstance(factor, (int, float)) and factor == 1


def _patch_keras_replica_scaling() -> None:
    """Wrap Keras's ``scale_loss_for_distribution`` / ``unscale_loss_for_distribution`` once: in a
    thread with a factor set (:func:`keras_losses_scaled_by`) they multiply / divide by it instead of
    dividing / multiplying by the number of replicas (replicas trace in threads of their own)."""
    _keras()
    if _per_replica_patch["done"]:
        return
    with _per_replica_lock:
        if _per_replica_patch["done"]:
            return
        try:
            from keras.src.losses import loss as loss_module
            scale_original = loss_module.scale_loss_for_distribution
            unscale_original = loss_module.unscale_loss_for_distribution
        except (ImportError, AttributeError) as e:
            raise _missing("keras.src.losses.loss.scale_loss_for_distribution",
                           "a Keras loss would be divided by the number of replicas whatever each replica's "
                           "share of the batch", e) from e

        def scale(value):
            factor = getattr(_per_replica, "factor", None)
            if factor is None:
                return scale_original(value)
            return value if _is_one(factor) else value * _tf().cast(factor, value.dtype)

        def unscale(value):
            factor = getattr(_per_replica, "factor", None)
            if factor is None:
                return unscale_original(value)
            tf = _tf()
            return value if _is_one(factor) else tf.math.divide_no_nan(value, tf.cast(factor, value.dtype))
        scale._kerastrainer_original = scale_original
        unscale._kerastrainer_original = unscale_original
        loss_module.scale_loss_for_distribution = scale
        loss_module.unscale_loss_for_distribution = unscale
        _per_replica_patch["done"] = True


@contextmanager
def keras_losses_scaled_by(factor):
    """In this context, in this thread, Keras scales a mean loss by ``factor`` (a number or a scalar
    tensor: the replica's share of the global batch) where it would divide it by the number of
    replicas, and its loss trackers divide by ``factor`` where they would multiply.

    Keras divides a mean loss by the replicas inside ``keras.src.losses.loss`` with no switch; with a
    replica's share instead, replicas of an unevenly split batch (47 and 46 samples of 93) sum to the
    whole batch's mean loss and gradient. Raises :class:`InternalsError` when the functions moved."""
    _patch_keras_replica_scaling()
    before = getattr(_per_replica, "factor", None)
    _per_replica.factor = factor
    try:
        yield
    finally:
        _per_replica.factor = before


def keras_forward_losses_unscaled(model):
    """While ``model``'s forward call runs in this context (this thread), a Keras loss called inside it
    (a layer's ``add_loss(self.loss_fn(y, p))``) is not divided by the replicas: Keras's TensorFlow
    trainer divides every ``add_loss`` loss once more where it sums them (its
    ``_aggregate_additional_loss``), which would divide such a loss twice (half the loss and the
    gradient on two replicas; ``keras.Model.fit`` under ``MirroredStrategy`` does so)."""
    return _forward_scope(model)


@contextmanager
def _forward_scope(model):
    _patch_keras_replica_scaling()
    own = model.__dict__.get("call")
    bound = model.call

    def call(*args, **kwargs):
        with keras_losses_scaled_by(1):
            return bound(*args, **kwargs)

    object.__setattr__(model, "call", call)   # Layer.__call__ looks up self.call; no tracking wanted
    try:
        yield
    finally:
        if own is None:
            object.__delattr__(model, "call")
        else:
            object.__setattr__(model, "call", own)
