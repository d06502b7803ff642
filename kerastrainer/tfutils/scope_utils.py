"""Scope helpers of ``tensorpack.tfutils.scope_utils``.

In kerastrainer every layer and ``tfv1.get_variable`` is shared by scoped name through the
model's layer store, so reusing a variable scope needs no flag: ``auto_reuse_variable_scope``
only opens the scope.

Example::

    @under_name_scope()
    def head(x):
        return FullyConnected('fc', x, 10)    # variables 'head/fc/W', ...
"""
from __future__ import annotations

import functools
from typing import Callable, Optional

import tensorflow as tf

__all__ = ["auto_reuse_variable_scope", "under_name_scope", "under_variable_scope", "cached_name_scope"]


def auto_reuse_variable_scope(func: Callable) -> Callable:
    """Run ``func`` in the current variable scope with reuse on (TF1's AUTO_REUSE), in the current
    name scope: re-entering the scope opens no new name scope (``discrim/discrim_1``), so the layers
    get the same scoped names, and are the same layers, at every call (as tensorpack's)."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        scope = tf.compat.v1.get_variable_scope()
        with tf.compat.v1.variable_scope(scope, reuse=tf.compat.v1.AUTO_REUSE, auxiliary_name_scope=False):
            return func(*args, **kwargs)
    return wrapper


def under_name_scope(name_scope: Optional[str] = None) -> Callable:
    """Run the function under ``tf.name_scope(name_scope or the function's name)``;
    a ``name_scope=`` keyword of the call overrides it."""
    def deco(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            scope = kwargs.pop("name_scope", None) or name_scope or func.__name__
            with tf.name_scope(scope):
                return func(*args, **kwargs)
        return wrapper
    return deco


def under_variable_scope() -> Callable:
    """Run the function under a variable scope named like the function."""
    def deco(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with tf.compat.v1.variable_scope(func.__name__):
                return func(*args, **kwargs)
        return wrapper
    return deco


def cached_name_scope(name: str, top_level: bool = True):
    """``tf.name_scope(name)`` (scopes are re-entered by name in TF2; nothing to cache)."""
    return tf.name_scope(name)
