"""``lms_block``: mark a part of a tower function as one LMS block.

A block is a function of tensors. Called inside a training tower whose model has
an active :class:`~kerastrainer.lms.LMS`, it runs under the mode LMS chose for its
key (recompute, offload, both, or none); anywhere else it is a plain call inside
a name scope, so a model with blocks trains and predicts as before without LMS.

The block runs in the name scope ``name`` (entered by absolute name, like a
functional layer), so replacing ``with tf.name_scope('res2'): y = f(x)`` by
``y = lms_block('res2', f)(x)`` keeps every variable name.

Example::

    def build_graph(self, image, label):
        x = Conv2D('conv0', image, 64, 3)
        for i in range(8):
            x = lms_block(f'res{i}', residual)(x, 64)    # residual(x, channels)
        ...

    @lms_block('head')                                   # as a decorator
    def head(x):
        return FullyConnected('fc', GlobalAvgPooling('gap', x), 10)
"""
from __future__ import annotations

import contextlib
import functools
import threading
from typing import Callable, Optional, Union

import tensorflow as tf

from ..tfutils.tower import TowerContext, current_layer_store, current_scope_name, get_current_tower_context, \
    layer_scope
from . import _state

__all__ = ["lms_block", "current_block_key", "inside_block"]

_local = threading.local()


def current_block_key() -> Optional[str]:
    """The key of the LMS block being traced by this thread, or None."""
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else None


@contextlib.contextmanager
def inside_block(key: str):
    """Inside: :func:`current_block_key` is ``key`` (blocks nested in it run plainly)."""
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    stack.append(key)
    try:
        yield
    finally:
        stack.pop()


def _lms_here():
    """The active LMS of this tower, or None when the block must run plainly."""
    ctx = get_current_tower_context()
    if ctx is not None and not ctx.is_training:
        return None
    store = current_layer_store()
    if ctx is not None and getattr(store, "allow_create", False):
        return None  # the trainer's build pass: variables are being created, no gradient
    return _state.active_lms(store)


def _reentry(key: str, scope_key: str) -> Callable:
    """A context-manager factory that puts the recompute pass where the forward pass ran.

    The backward pass is built after the tower function returned: its tower context
    is gone and the name scope is the gradient's. Functional layers find their Keras
    layer by tower store and scoped key, so both are restored (a fresh context of
    the same tower: summaries the block adds again are dropped with it).
    """
    ctx = get_current_tower_context()

    @contextlib.contextmanager
    def reenter():
        with contextlib.ExitStack() as stack:
            if ctx is not None:
                stack.enter_context(TowerContext(ctx.name, is_training=ctx.is_training, index=ctx.index,
                                                 total=ctx.total, layer_store=ctx.layer_store))
            scope = "/".join(p for p in (tf.get_current_name_scope(), scope_key) if p)
            if scope:
                stack.enter_context(tf.name_scope(scope + "/"))
            stack.enter_context(inside_block(key))
            yield

    return reenter


def run_in_block(key: str, fn: Callable, args: tuple, kwargs: dict, lms=None, scope_key: Optional[str] = None):
    """Run ``fn(*args, **kwargs)`` as block ``key`` of ``lms`` (or plainly when None); its layers
    live under ``scope_key`` (``key`` unless the block has no scope of its own)."""
    # a block nested in a wrapped block runs plainly: the outer one already saves its memory
    if lms is not None and current_block_key() is None and not lms.profiling_here():
        lms.note_batch(args)
    mode = lms.mode_for(key) if lms is not None and current_block_key() is None else None
    if mode is None:
        return fn(*args, **kwargs)
    with inside_block(key):
        return lms.run_block(key, fn, args, kwargs, mode=mode,
                             reenter=_reentry(key, key if scope_key is None else scope_key))


def lms_block(name: Union[str, Callable], fn: Optional[Callable] = None, scope: bool = True) -> Callable:
    """A block named ``name`` around ``fn``: ``lms_block('res2', f)(x)`` or ``@lms_block('res2')``.

    ``fn`` takes its tensors as positional arguments (nested lists of tensors are
    fine); other positional or keyword arguments must not be tensors. It returns a
    tensor or a structure of tensors. ``@lms_block`` without a name uses the
    function's name. ``scope=False``: ``fn`` runs in the caller's name scope (its
    layers keep their names; ``name`` only names the block for LMS).
    """
    if callable(name) and fn is None:  # bare @lms_block
        return lms_block(name.__name__, name, scope=scope)
    if not isinstance(name, str) or not name:
        raise ValueError(f"lms_block needs a non-empty block name; got {name!r}.")
    if fn is None:
        return lambda f: lms_block(name, f, scope=scope)
    if not callable(fn):
        raise TypeError(f"lms_block({name!r}, fn): fn must be callable; got {type(fn).__name__}.")

    @functools.wraps(fn)
    def block(*args, **kwargs):
        if not scope:
            parent = current_scope_name()
            return run_in_block(f"{parent}/{name}" if parent else name, fn, args, kwargs, _lms_here(),
                                scope_key=parent)
        with layer_scope(name) as key:
            return run_in_block(key, fn, args, kwargs, _lms_here())

    block.lms_block_name = name
    return block
