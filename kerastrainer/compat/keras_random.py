"""Keras 3's unseeded random ops (``keras.random.normal(shape)``) inside replicated steps.

Keras 2's ``K.random_normal`` was a stateless TF op. Keras 3's unseeded random ops draw their
seeds from a global ``SeedGenerator``, a variable that Keras keeps **per thread**, and
``tf.distribute`` traces each replica of a step in a thread of its own. There the generator
does not exist, so Keras creates one inside the replicated trace, and TF fails with an
``UnliftableError`` about ``seed_generator_state`` (a VAE's sampling ``Lambda`` does this).
:func:`with_keras_random_state` runs a replica function with the generator of the thread
that starts the step: every replica draws from that one stream, each its own seeds (the
graph orders the draws).

Example::

    per_replica = strategy.run(with_keras_random_state(replica_step), args=feeds)
"""
from __future__ import annotations

import functools
from typing import Callable

__all__ = ["with_keras_random_state"]

try:  # Keras 3's per-thread global state and the name of its global seed generator
    from keras.src.backend.common import global_state as _keras_state
    from keras.src.random.seed_generator import GLOBAL_SEED_GENERATOR as _GENERATOR
except ImportError:  # pragma: no cover - another Keras layout: replicas keep Keras's own behaviour
    _keras_state = _GENERATOR = None


def with_keras_random_state(fn: Callable) -> Callable:
    """``fn``, run in any thread with the calling thread's Keras global seed generator.

    Call it in the thread that starts the step (where the model was built: Keras made the
    generator there, as a plain variable, on the model's first eager call). Without such a
    generator ``fn`` is returned unchanged.
    """
    gen = _keras_state.get_global_attribute(_GENERATOR) if _keras_state is not None else None
    if gen is None:
        return fn

    @functools.wraps(fn)
    def run(*args, **kwargs):
        if _keras_state.get_global_attribute(_GENERATOR) is not None:  # this thread has its own
            return fn(*args, **kwargs)
        _keras_state.set_global_attribute(_GENERATOR, gen)
        try:
            return fn(*args, **kwargs)
        finally:
            _keras_state.set_global_attribute(_GENERATOR, None)
    return run
