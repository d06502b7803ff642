"""TF1's ``tf.compat.v1.summary.scalar/histogram/image`` in a training tower (tensorpack programs
call them through ``tfv1``): routed to the trainer as TF2's are (``tfutils/summary.py``).

TF1's functions take no ``step`` and rescale float images (rather than clip them); in TF2 they
write nothing without a default writer. Installed when ``kerastrainer.compat`` is loaded
(:func:`install_tf1_summaries`, a process-wide patch through ``_internals.install_tf_summary_patch``).
"""
from __future__ import annotations

import functools

import tensorflow as tf

from .._internals import install_tf_summary_patch
from ..tfutils.summary import capture_histogram, capture_scalar, image_batch, scoped_name
from ..tfutils.tower import get_current_tower_context

__all__ = ["install_tf1_summaries"]


def _v1_float_image_to_unit(t):
    """TF1's ``tf.summary.image`` scaling of float images, into [0, 1].

    Each image on its own: all values >= 0: the largest becomes 1; some < 0: 0 becomes
    128/255 and the value of largest magnitude reaches 1/255 or 1 (TF1's documented rule).
    Weight and activation images (tensorpack's mnist-visualizations) depend on it.
    """
    t = tf.cast(t, tf.float32)
    finite = tf.math.is_finite(t)
    lo = tf.reduce_min(tf.where(finite, t, 0.0), axis=[1, 2, 3], keepdims=True)
    hi = tf.reduce_max(tf.where(finite, t, 0.0), axis=[1, 2, 3], keepdims=True)
    eps = 1e-6  # TF1 maps an all-zero image to 0 (or to 128 when it has negatives)
    signed = lo < 0
    mag = tf.where(signed, tf.maximum(-lo, tf.abs(hi)), hi)
    scale = tf.where(mag < eps, 0.0, tf.where(signed, 127.0, 255.0) / tf.maximum(mag, eps))
    offset = tf.where(signed, 128.0, 0.0)
    out = tf.where(finite, t * scale + offset, 0.0)
    return tf.clip_by_value(tf.floor(out), 0.0, 255.0) / 255.0  # TF1 truncates to uint8


def _capture_image_v1(ctx, name, tensor, max_outputs=3, *_, **__):
    t = image_batch(name, tensor, max_outputs)
    t = tf.image.convert_image_dtype(t, tf.float32) if t.dtype == tf.uint8 else _v1_float_image_to_unit(t)
    ctx.tensor_summaries[scoped_name(name)] = t


# tf.compat.v1.summary.*(name, tensor, [max_outputs,] collections=None, family=None): no step
# argument, and float images are rescaled rather than clipped
_CAPTURES_V1 = {"scalar": capture_scalar, "histogram": capture_histogram, "image": _capture_image_v1}


def _tower_aware_v1(kind: str, original):
    capture = _CAPTURES_V1[kind]

    @functools.wraps(original)
    def summary_op(name, tensor, *args, **kwargs):
        ctx = get_current_tower_context()
        if ctx is None:
            return original(name, tensor, *args, **kwargs)
        if ctx.is_main_training_tower:
            capture(ctx, name, tensor, *args, **kwargs)
        return tf.constant(b"")  # TF1 returns a serialized Summary; nothing reads it in TF2

    summary_op._kerastrainer_original = original
    return summary_op


def install_tf1_summaries() -> None:
    """Route ``tf.compat.v1.summary.scalar/histogram/image`` calls made in a tower to the trainer."""
    install_tf_summary_patch(None, (), _tower_aware_v1, _CAPTURES_V1)
