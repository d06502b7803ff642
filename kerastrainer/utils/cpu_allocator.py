"""The CPU allocator kerastrainer asks TensorFlow for when it is imported: TF's BFC allocator.

TensorFlow's default CPU allocator is the C library's ``malloc``. glibc gives a freed block of a
few MiB back to the system, so a training step's activations (6 MiB for a 32-filter conv on a
batch of 64 MNIST images) land on fresh pages every step, each page faulted in and zeroed by the
kernel. Measured on the bench's small convnet (2 CPU cores, ``bench/keras_overhead.py``): 1,700-2,100
minor page faults per step and ~30% more time per step than with the BFC allocator, which keeps
its regions and reuses them (1-10 faults per step). How many faults a step makes depends on the
order in which the program frees its tensors, so two programs training the same model can differ
by that much. With oneDNN on (``TF_ENABLE_ONEDNN_OPTS=1``, or a CPU where TensorFlow turns it on)
TensorFlow allocates through oneDNN's allocator, which pools large blocks: no faults either way.

``import kerastrainer`` sets ``TF_CPU_ALLOCATOR_USE_BFC=true`` unless it is set already (a value
you set is kept: ``TF_CPU_ALLOCATOR_USE_BFC=false`` opts out). TensorFlow reads it once, when it
makes its CPU allocator (its first tensor), so kerastrainer must be imported before the first
TensorFlow op; otherwise TensorFlow keeps ``malloc`` and the trainer says so in one log line.
What this gives up: the BFC allocator keeps the memory of its largest use until the process ends
(``malloc`` may return it), and it is capped, by default at TensorFlow's 64 GiB
(``TF_CPU_BFC_MEM_LIMIT_IN_MB``): a program holding more in CPU tensors raises that cap or opts
out. Child processes started after the import inherit the setting.

Example::

    import kerastrainer          # before the first TensorFlow op
    import tensorflow as tf
"""
from __future__ import annotations

import os
from typing import MutableMapping, Optional

__all__ = ["ENV", "apply_default_cpu_allocator", "default_allocator_state", "bfc_may_be_late"]

ENV = "TF_CPU_ALLOCATOR_USE_BFC"

# what apply_default_cpu_allocator found: None (not run), "set" or "present" (the user's value),
# and whether TensorFlow had already started (then its allocator may be made already)
_state = {"result": None, "tf_started": False}


def apply_default_cpu_allocator(environ: Optional[MutableMapping[str, str]] = None) -> str:
    """Set ``TF_CPU_ALLOCATOR_USE_BFC=true`` in ``environ`` (``os.environ`` by default) unless it is set.

    Returns ``'set'`` or ``'present'`` (a value was there, kept as it is).
    """
    env = os.environ if environ is None else environ
    result = "present" if env.get(ENV, "").strip() else "set"
    if result == "set":
        env[ENV] = "true"
    if environ is None:
        from .._internals import tf_runtime_started
        _state["result"] = result
        _state["tf_started"] = tf_runtime_started()
    return result


def default_allocator_state() -> dict:
    """``{'result': ..., 'tf_started': ...}`` of the import-time :func:`apply_default_cpu_allocator`."""
    return dict(_state)


def bfc_may_be_late() -> bool:
    """Whether kerastrainer asked for the BFC allocator after TensorFlow had started (so TF may use
    ``malloc``). False with oneDNN on: TensorFlow then allocates through oneDNN's pool either way."""
    return _state["result"] == "set" and bool(_state["tf_started"]) and not _onednn_enabled()


def _onednn_enabled() -> bool:
    from .._internals import onednn_enabled
    return onednn_enabled()
