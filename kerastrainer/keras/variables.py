"""Move a Keras model's variables onto a ``tf.distribute`` strategy, and back.

A Keras 3 variable (TensorFlow backend) wraps one ``tf.Variable`` (reached through
``kerastrainer._internals.tf_variable_of``).
A model built outside a strategy's scope holds plain ``tf.Variable`` s, which
replicas of a ``MirroredStrategy`` cannot update. Rather than rebuilding the model
(tensorpack's ``get_model`` convention, which would break weight sharing with a
model the user already holds), :func:`place_on_strategy` swaps each wrapped
``tf.Variable`` for one created in the strategy's scope with the same value, so the
user's ``keras.Model`` object *is* the trained model. :func:`place_off_strategy`
swaps plain variables back after training, so the model works anywhere again
(``model.save``, ``keras.Model.fit``, another trainer).

Non-trainable variables with Keras' default aggregation (``'none'``, e.g.
BatchNorm's moving statistics) become ``ONLY_FIRST_REPLICA`` on a multi-replica
strategy: every replica keeps the first replica's update, so the copies never
drift apart (``keras.Model.fit`` under ``MirroredStrategy`` lets them drift).

Example::

    with strategy.scope():
        place_on_strategy(model.variables + optimizer.variables, strategy)
    ... train ...
    place_off_strategy(model.variables + optimizer.variables)
    rekey_optimizer(optimizer)
"""
from __future__ import annotations

from typing import Iterable, List

import tensorflow as tf

from .._internals import rekey_optimizer_variables, set_tf_variable_of, tf_variable_of

__all__ = ["place_on_strategy", "place_off_strategy", "rekey_optimizer", "unique_variables"]


def unique_variables(variables: Iterable) -> List:
    """The variables without duplicates (by identity), order kept."""
    seen, out = set(), []
    for v in variables:
        if id(v) not in seen:
            seen.add(id(v))
            out.append(v)
    return out


def _inner(v):
    """The tf.Variable behind a Keras variable; None for anything else (or one not yet made)."""
    inner = tf_variable_of(v)
    return inner if inner is not v else None


def _is_placed(inner: tf.Variable, strategy: tf.distribute.Strategy) -> bool:
    try:
        return bool(strategy.extended.variable_created_in_scope(inner))
    except (AttributeError, ValueError):
        return False


def _plain_name(inner: tf.Variable) -> str:
    return inner.name.split(":")[0]


def place_on_strategy(variables: Iterable, strategy: tf.distribute.Strategy) -> int:
    """Re-create the ``tf.Variable`` inside each Keras variable in ``strategy``'s scope.

    Variables already created in that strategy are left alone. Returns how many moved.
    Call it with ``strategy.scope()`` entered or not (it enters the scope itself).
    """
    multi = strategy.num_replicas_in_sync > 1
    moved = 0
    pending = []
    for v in unique_variables(variables):
        inner = _inner(v)
        if inner is None or _is_placed(inner, strategy):
            continue
        # read before entering the scope: reading a variable of another strategy
        # inside this one's scope is not allowed
        pending.append((v, inner, tf.identity(inner.read_value()) if not hasattr(inner, "values")
                        else tf.identity(inner.values[0].read_value())))
    if not pending:
        return 0
    with strategy.scope():
        for v, inner, value in pending:
            aggregation = inner.aggregation
            if multi and not inner.trainable and aggregation == tf.VariableAggregation.NONE:
                aggregation = tf.VariableAggregation.ONLY_FIRST_REPLICA
            with tf.init_scope():
                set_tf_variable_of(v, tf.Variable(value, trainable=inner.trainable, name=_plain_name(inner),
                                                  aggregation=aggregation, synchronization=inner.synchronization))
            moved += 1
    return moved


def place_off_strategy(variables: Iterable) -> int:
    """Swap distributed variables back to plain ``tf.Variable`` s holding the same values."""
    moved = 0
    for v in unique_variables(variables):
        inner = _inner(v)
        if inner is None or not isinstance(inner, tf.distribute.DistributedValues):
            continue
        summed = inner.synchronization == tf.VariableSynchronization.ON_READ and \
            inner.aggregation in (tf.VariableAggregation.SUM, tf.VariableAggregation.MEAN)
        # a metric's state (each replica holds its part): the replicas' total, as a read gives it
        value = inner.read_value() if summed else inner.values[0].read_value()
        aggregation = inner.aggregation
        if aggregation == tf.VariableAggregation.ONLY_FIRST_REPLICA and not inner.trainable:
            aggregation = tf.VariableAggregation.NONE
        with tf.init_scope():
            set_tf_variable_of(v, tf.Variable(value, trainable=inner.trainable, name=_plain_name(inner),
                                              aggregation=aggregation, synchronization=inner.synchronization))
        moved += 1
    return moved


def rekey_optimizer(optimizer) -> None:
    """Re-index a built Keras optimizer after its variables' inner ``tf.Variable`` s changed.

    The TensorFlow optimizer keys its slots by the inner variable's identity; after
    :func:`place_on_strategy` or :func:`place_off_strategy` those keys are stale.
    Also points the optimizer at the current strategy (it captures one when created).
    """
    opt = getattr(optimizer, "inner_optimizer", None) or optimizer
    for o in {id(optimizer): optimizer, id(opt): opt}.values():
        rekey_optimizer_variables(o)
