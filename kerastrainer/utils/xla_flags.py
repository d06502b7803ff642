"""XLA flags kerastrainer adds to ``XLA_FLAGS`` when it is imported.

XLA reads ``XLA_FLAGS`` once, when TensorFlow first needs it (on a GPU, as soon as the GPU is
set up), so the flags are added at ``import kerastrainer``, before any training code runs.

The one default: ``--xla_disable_hlo_passes=cudnn-fused-convolution-rewriter``. That pass turns
conv + bias (+ activation) into cuDNN fused convolutions. Measured on an H100 (TF 2.21, cuDNN
9.3, bf16, ``keras.applications.ResNet50``): autotuning them had cuDNN compile kernels with
NVRTC on one host thread, GPU idle, for more than 4 minutes without finishing the first step;
without the pass the whole step compiled in 66 s and trained at 3,603 images/s. Models whose
convolutions have no bias (BatchNorm after them, as in the zoo's ResNet) never take that pass.

Set ``KERASTRAINER_XLA_DEFAULTS=0`` to leave ``XLA_FLAGS`` as it is.

Example::

    import kerastrainer          # before the first TensorFlow op
    import tensorflow as tf
"""
from __future__ import annotations

import os
from typing import List, MutableMapping, Optional

__all__ = ["DISABLED_PASSES", "apply_default_xla_flags", "default_flags_state", "merge_disabled_passes"]

ENV_OPT_OUT = "KERASTRAINER_XLA_DEFAULTS"
DISABLED_PASSES = ("cudnn-fused-convolution-rewriter",)
_DISABLE = "--xla_disable_hlo_passes="

# what apply_default_xla_flags found: None (not run), "added", "present", "opted-out";
# and whether TensorFlow had already started (so XLA may have read its flags before)
_state = {"result": None, "tf_started": False}


def _tf_started() -> bool:
    """Whether TensorFlow's runtime is up (XLA may have read XLA_FLAGS already)."""
    from .._internals import tf_runtime_started
    return tf_runtime_started()


def merge_disabled_passes(flags: str, passes=DISABLED_PASSES) -> str:
    """``flags`` with ``passes`` added to its ``--xla_disable_hlo_passes`` (one is made if absent)."""
    tokens: List[str] = flags.split()
    for i, tok in enumerate(tokens):
        if tok.startswith(_DISABLE):
            have = [p for p in tok[len(_DISABLE):].split(",") if p]
            tokens[i] = _DISABLE + ",".join(have + [p for p in passes if p not in have])
            return " ".join(tokens)
    return " ".join(tokens + [_DISABLE + ",".join(passes)])


def apply_default_xla_flags(environ: Optional[MutableMapping[str, str]] = None) -> str:
    """Add kerastrainer's default XLA flags to ``environ['XLA_FLAGS']`` (``os.environ`` by default).

    Returns what happened: ``'added'``, ``'present'`` (already there) or ``'opted-out'``
    (``KERASTRAINER_XLA_DEFAULTS=0``).
    """
    env = os.environ if environ is None else environ
    if env.get(ENV_OPT_OUT, "1").strip().lower() in ("0", "false", "no", "off"):
        result = "opted-out"
    else:
        before = env.get("XLA_FLAGS", "")
        after = merge_disabled_passes(before)
        result = "present" if after.split() == before.split() else "added"
        env["XLA_FLAGS"] = after
    if environ is None:
        _state["result"] = result
        _state["tf_started"] = _tf_started()
    return result


def default_flags_state() -> dict:
    """``{'result': ..., 'tf_started': ...}`` of the import-time :func:`apply_default_xla_flags`."""
    return dict(_state)
