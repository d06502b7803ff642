"""Thread-local state shared by the LMS modules.

- which :class:`~kerastrainer.lms.LMS` is active for a layer store (or a Keras model),
- the per-trace record of blocks in forward order (for ``swapin_ahead`` triggers),
- the "recomputing" flag under which assignments to non-trainable variables
  (BatchNorm moving statistics) are skipped, so that a recomputed block does not
  update them a second time.
"""
from __future__ import annotations

import contextlib
import threading
import weakref
from typing import Dict, List, Optional

import tensorflow as tf

from .._internals import install_variable_assign_patch

__all__ = ["activate", "deactivate", "active_lms", "recomputing", "is_recomputing",
           "TraceState", "trace_state"]

_local = threading.local()
_active: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_active_lock = threading.Lock()


def activate(owner, lms) -> None:
    """Make ``lms`` the LMS of ``owner`` (a LayerStore, or any weak-referenceable key)."""
    with _active_lock:
        _active[owner] = lms


def deactivate(owner) -> None:
    with _active_lock:
        _active.pop(owner, None)


def active_lms(owner):
    """The LMS active for ``owner``, or None."""
    if owner is None:
        return None
    try:
        return _active.get(owner)
    except TypeError:  # not weak-referenceable
        return None


# --- skipping state updates while a block is recomputed -----------------------------------
class _Suppressed:
    """What the recompute pass skipped (to detect randomness it cannot reproduce)."""

    def __init__(self):
        self.int_state: List[str] = []


def is_recomputing() -> bool:
    return getattr(_local, "recompute_depth", 0) > 0


@contextlib.contextmanager
def recomputing():
    """Inside: assignments to non-trainable variables are no-ops (see :func:`_install_patches`).

    Yields a record of the skipped assignments to integer variables (random seed states).
    """
    _install_patches()
    rec = _Suppressed()
    stack = getattr(_local, "records", None)
    if stack is None:
        stack = _local.records = []
    _local.recompute_depth = getattr(_local, "recompute_depth", 0) + 1
    stack.append(rec)
    try:
        yield rec
    finally:
        stack.pop()
        _local.recompute_depth -= 1


def _skip(var) -> bool:
    if not is_recomputing() or getattr(var, "trainable", True):
        return False
    dtype = tf.as_dtype(getattr(var, "dtype", tf.float32))
    if dtype.is_integer:
        for rec in _local.records:
            rec.int_state.append(getattr(var, "path", None) or getattr(var, "name", "?"))
    return True


_patched = False
_patch_lock = threading.Lock()


def _install_patches() -> None:
    """Wrap ``assign``/``assign_add``/``assign_sub`` of Keras and TF variables once (a
    process-wide patch, installed through ``_internals.install_variable_assign_patch``).

    Outside a recompute pass they call the original method (one thread-local read).
    Inside, an update of a non-trainable variable returns the variable unchanged:
    the forward pass already applied it (a moving average updated twice would be
    wrong, not merely redundant).
    """
    global _patched
    with _patch_lock:
        if _patched:
            return
        install_variable_assign_patch(_wrap_assign)
        _patched = True


def _wrap_assign(orig):
    def method(self, *args, **kwargs):
        if _skip(self):
            return self
        return orig(self, *args, **kwargs)
    method._lms_wrapped = True
    method.__name__ = orig.__name__
    method.__doc__ = orig.__doc__
    return method


# --- blocks of one trace, in forward order --------------------------------------------------
class TraceState:
    """The blocks traced in one graph by one thread (one replica), in forward order.

    Each entry is a dict; the backward pass of block ``i`` stores its incoming
    gradients under ``'dys'`` so that earlier blocks can start their swap-in then.
    """

    def __init__(self):
        self.blocks: List[Dict] = []
        self.levels = None   # topo.Levels of the graph, for TFLMS's knobs (made on first use)


_traces: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_traces_lock = threading.Lock()


def trace_state() -> Optional[TraceState]:
    """The state of the graph being built by this thread; None when executing eagerly."""
    if tf.executing_eagerly():
        return None
    graph = tf.compat.v1.get_default_graph()
    with _traces_lock:
        per_thread = _traces.get(graph)
        if per_thread is None:
            per_thread = _traces[graph] = {}
        state = per_thread.get(threading.get_ident())
        if state is None:
            state = per_thread[threading.get_ident()] = TraceState()
        return state
