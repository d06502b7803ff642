"""``tfv1.get_variable`` in a tower function or ``optimizer()``: one variable per name, kept
in the model's layer store, returned again by every later trace and every tower."""
from __future__ import annotations

from contextlib import contextmanager

import tensorflow as tf

from .._internals import fresh_tf1_variable_store
from ..tfutils.layer_store import LayerStore
from ..tfutils.variable_replay import is_tf1_variable_call

__all__ = ["tf1_variables_in_store"]


@contextmanager
def tf1_variables_in_store(store: LayerStore):
    """Route ``tf.compat.v1`` variable creation to ``store`` (by the variable scope's name)."""

    def creator(next_creator, **kwargs):
        if not is_tf1_variable_call(kwargs):
            return next_creator(**kwargs)
        name = (kwargs.get("name") or "Variable").split(":")[0]
        var = store.raw_variables.get(name)
        if var is not None:
            return var
        store._check_create(name)
        if not kwargs.get("trainable", True) and kwargs.get("aggregation") in (
                None, tf.VariableAggregation.NONE):
            kwargs["aggregation"] = tf.VariableAggregation.ONLY_FIRST_REPLICA
        with tf.init_scope():  # made once, outside any trace (like the store's own variables)
            var = next_creator(**kwargs)
        store.raw_variables[name] = var
        return var

    # TF2 shares TF1's variable table between traces (and models): without a fresh table a
    # second trace of the tower would see its own variables as duplicates. The layer store,
    # reached through the creator above, is what shares variables across traces and towers. A tower
    # entered under reuse=True (a replica's thread in MirroredStrategy) gets a table that starts with
    # the store's variables, which its get_variable must find there; elsewhere TF1 may refuse a name
    # already in the table (reuse=False: eager code, a v1 graph), so the creator shares them instead.
    known = dict(store.raw_variables) if tf.compat.v1.get_variable_scope().reuse is True else None
    with fresh_tf1_variable_store(known), tf.variable_creator_scope(creator):
        yield
