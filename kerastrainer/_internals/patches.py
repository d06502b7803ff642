"""Process-wide patches of Keras and TF: variable assignment (LMS's recompute pass), ``tf.summary.*``
(a tower has no summary writer) and ``tf.compat.v1.layers`` (when TF's own cannot load).

This module owns replacing attributes of Keras/TF classes and modules and putting them back
(:func:`restore_attributes`); when and for how long a patch is in place is its caller's
(``tfutils/summary.py``, ``compat/``, ``lms/``). A patch for one block of a custom trainer's
graph is ``tf1_graph.py``'s.
"""
from __future__ import annotations

import sys
import threading
from typing import Callable, List, Optional

from .versions import _keras, _missing, _tf

__all__ = ["install_variable_assign_patch", "install_tf_summary_patch", "restore_attributes", "install_tf1_layers"]


_assign_patch = {"done": False}
_assign_lock = threading.Lock()


def install_variable_assign_patch(wrap: Callable) -> None:
    """Process-wide patch, once: replace ``assign`` / ``assign_add`` / ``assign_sub`` of
    ``keras.Variable``, TF's ``BaseResourceVariable`` and ``DistributedVariable`` by ``wrap(method)``
    (what LMS's recompute pass uses to skip updates of non-trainable variables; TF has no hook on
    assignments). The wrapped method carries ``_lms_wrapped = True`` and is never wrapped twice.
    Raises :class:`InternalsError` when a TF variable class moved (BatchNorm statistics would be
    updated twice by a recomputed block).
    """
    with _assign_lock:
        if _assign_patch["done"]:
            return
        keras = _keras()
        try:
            from tensorflow.python.distribute import values as dist_values
            from tensorflow.python.ops import resource_variable_ops
            classes = [keras.Variable, resource_variable_ops.BaseResourceVariable,
                       dist_values.DistributedVariable]
        except (ImportError, AttributeError) as e:
            raise _missing("tensorflow.python's BaseResourceVariable / DistributedVariable",
                           "a recomputed block would update BatchNorm's moving statistics a second time", e) from e
        for cls in classes:
            for meth in ("assign", "assign_add", "assign_sub"):
                orig = cls.__dict__.get(meth)
                if orig is None:
                    # inherited: patch on the class that defines it (found via the MRO)
                    orig = getattr(cls, meth, None)
                if orig is None or getattr(orig, "_lms_wrapped", False):
                    continue
                setattr(cls, meth, wrap(orig))
        _assign_patch["done"] = True


def install_tf_summary_patch(wrap_v2: Callable, kinds_v2, wrap_v1: Optional[Callable] = None,
                             kinds_v1=()) -> List[tuple]:
    """Patch: replace ``tf.summary.<kind>`` (and ``tf.compat.v2.summary``) by ``wrap_v2(kind,
    original)`` for each kind of ``kinds_v2``, and ``tf.compat.v1.summary.<kind>`` by
    ``wrap_v1(kind, original)`` for ``kinds_v1``: a tower has no summary writer, and TF offers no
    hook on these functions. A function already wrapped (it has ``_kerastrainer_original``) is kept.
    Returns ``(module, kind, original)`` of each replacement made, for :func:`restore_attributes`.
    """
    tf = _tf(patching_v1=wrap_v1 is not None)
    replaced = []
    for module in {id(m): m for m in (tf.summary, tf.compat.v2.summary)}.values():
        for kind in kinds_v2:
            fn = getattr(module, kind, None)
            if fn is not None and not hasattr(fn, "_kerastrainer_original"):
                setattr(module, kind, wrap_v2(kind, fn))
                replaced.append((module, kind, fn))
    if wrap_v1 is None:
        return replaced
    v1 = tf.compat.v1.summary
    for kind in kinds_v1:
        fn = getattr(v1, kind, None)
        if fn is not None and not hasattr(fn, "_kerastrainer_original"):
            setattr(v1, kind, wrap_v1(kind, fn))
            replaced.append((v1, kind, fn))
    return replaced


def restore_attributes(replaced: List[tuple]) -> None:
    """Undo replacements ``(module, name, original)`` whose wrapper is still in place."""
    for module, name, original in reversed(replaced):
        current = getattr(module, name, None)
        if getattr(current, "_kerastrainer_original", None) is original:
            setattr(module, name, original)


def install_tf1_layers(module) -> bool:
    """Process-wide patch: make ``tf.compat.v1.layers`` ``module`` when TF's own cannot load (with
    Keras 3 its lazy loader fails on the missing Keras 2 package at the first attribute, so nothing
    that works is replaced). Returns whether it was installed.
    """
    import importlib
    tf = _tf(patching_v1=True)
    # `import tensorflow.compat.v1` makes a module object of its own (and rebinds tf.compat.v1):
    # every object a program may reach as tensorflow.compat.v1 gets the module
    modules = {id(m): m for m in (tf.compat.v1, importlib.import_module("tensorflow.compat.v1"),
                                  sys.modules.get("tensorflow._api.v2.compat.v1")) if m is not None}
    for v1 in modules.values():
        current = v1.__dict__.get("layers")
        if current is module:
            continue
        try:
            getattr(current, "conv2d")
            return False   # TF's tf.layers loads (Keras 2 installed): kept
        except Exception:  # noqa: BLE001 - ModuleNotFoundError from the lazy loader, or no attribute
            pass
        setattr(v1, "layers", module)
    return True
