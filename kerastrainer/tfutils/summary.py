"""Summaries from inside a tower function.

``add_moving_summary(cost, accuracy)`` records scalars that the trainer returns from
each training call (averaged over the call's steps and the replicas); the
``MovingAverageSummary`` callback smooths them and sends them to the monitors
(``stats.json``, TensorBoard, the console table). Only the main training tower
records, as in tensorpack.

``tf.summary.scalar``, ``tf.summary.histogram`` and ``tf.summary.image`` called in a
training tower (TF2's, or TF1's ``tf.compat.v1.summary`` that tensorpack programs call
through ``tfv1``) are captured the same way (a tower has no summary writer; without
this they would write nothing): a scalar becomes a moving summary, a histogram and
an image (its first ``max_outputs`` samples) go to TensorBoard from the last step of
each epoch. Their ``step`` argument is ignored: the trainer knows the step. Outside
a tower these functions behave as in TensorFlow.

Example::

    cost = tf.reduce_mean(xent, name='cross_entropy_loss')
    add_moving_summary(cost)
    add_tensor_summary(logits, ['histogram', 'rms'], name='logits')
    tf.summary.image('input', image, max_outputs=4)     # TensorBoard's Images tab
"""
from __future__ import annotations

import functools
import re

import tensorflow as tf

from ..utils import logger
from .tower import current_scope_name, get_current_tower_context

__all__ = ["add_moving_summary", "add_tensor_summary", "add_param_summary", "summary_name"]


def summary_name(t, name=None) -> str:
    """A readable name for a tensor: the given one, the op name without tower scope, or 'tensor'."""
    if name:
        return name
    try:
        op_name = t.op.name
    except (AttributeError, ValueError):
        op_name = getattr(t, "name", None) or "tensor"
    op_name = op_name.split(":")[0]
    ctx = get_current_tower_context()
    # drop the tower's scope (which may sit inside loop or replica scopes)
    prefix = ctx._scope_prefix if ctx is not None else ""
    if prefix and op_name.startswith(prefix):
        op_name = op_name[len(prefix):]
    return op_name.lstrip("/")


def _recording_ctx():
    ctx = get_current_tower_context()
    if ctx is None or not ctx.is_main_training_tower:
        return None
    return ctx


_KNOBS_WARNED = set()


def _warn_unused_knobs(fn: str, knobs: dict, why: str) -> None:
    """tensorpack's knobs of the summary functions that have no effect here: said once each."""
    for k in sorted(knobs):
        if (fn, k) not in _KNOBS_WARNED:
            _KNOBS_WARNED.add((fn, k))
            logger.warning("%s(%s=...) has no effect in kerastrainer: %s", fn, k, why)


def add_moving_summary(*tensors, names=None, **kwargs):
    """Record scalar tensors as training statistics. Returns the tensors unchanged.

    Args:
        tensors: scalar tensors; named by ``names`` or by their op name
            (``tf.identity(x, name='accuracy')``).
        names: optional list of names, one per tensor.
        kwargs: tensorpack's ``decay``, ``collection``, ``summary_collections``: accepted, without
            effect, with a warning (the average is ``MovingAverageSummary(decay=...)``'s).
    """
    if kwargs:
        _warn_unused_knobs("add_moving_summary", kwargs, "the moving average of every statistic is "
                           "MovingAverageSummary's (a default callback: MovingAverageSummary(decay=...) sets it), "
                           "and there are no graph collections.")
    ctx = _recording_ctx()
    if names is not None and len(names) != len(tensors):
        raise ValueError("add_moving_summary: names must have one entry per tensor")
    if ctx is None:
        return list(tensors)
    for i, t in enumerate(tensors):
        t = tf.convert_to_tensor(t)
        if t.shape.rank not in (0, None):
            raise ValueError(f"add_moving_summary takes scalars; got shape {t.shape} for {summary_name(t)}")
        name = summary_name(t, names[i] if names else None)
        ctx.moving_summaries[name] = tf.cast(tf.reshape(t, []), tf.float32)
    return list(tensors)


def add_tensor_summary(x, types=("histogram",), name=None, collections=None, main_tower_only=True):
    """Summaries of a tensor: 'histogram' goes to TensorBoard; 'rms', 'mean', 'max', 'min',
    'sparsity' and 'scalar' become moving scalars named ``<name>/<type>``.

    ``main_tower_only=False``: every tower records it, and the scalars are the mean over the
    towers (the histogram stays the main tower's)."""
    if collections is not None:
        _warn_unused_knobs("add_tensor_summary", {"collections": collections},
                           "there are no graph collections; the summaries reach the monitors directly.")
    ctx = get_current_tower_context()
    if ctx is None or (main_tower_only and not ctx.is_main_training_tower):
        return
    name = summary_name(x, name)
    xf = tf.cast(x, tf.float32)
    scalar_fns = {
        "scalar": lambda: tf.reshape(xf, []),
        "rms": lambda: tf.sqrt(tf.reduce_mean(tf.square(xf))),
        "mean": lambda: tf.reduce_mean(xf),
        "max": lambda: tf.reduce_max(xf),
        "min": lambda: tf.reduce_min(xf),
        "sparsity": lambda: tf.math.zero_fraction(xf),
    }
    for typ in types:
        if typ == "histogram":
            ctx.tensor_summaries[name] = tf.reshape(xf, [-1])
        elif typ in scalar_fns:
            value = scalar_fns[typ]()
            if not main_tower_only and ctx.total > 1:
                # the trainer sums each statistic over the replicas (only the main tower records the
                # others): every tower records this one, so each gives its share of the mean
                value = value / float(ctx.total)
            ctx.moving_summaries[f"{name}/{typ}"] = value
        else:
            raise ValueError(f"Unknown summary type {typ!r}; use histogram, {', '.join(scalar_fns)}")


def add_param_summary(*summary_lists):
    """``add_param_summary(('.*/W', ['histogram', 'rms']))``: summaries of matching variables.

    Variables are matched by their store names (``'conv0/W'``) in the current tower's store.
    """
    ctx = _recording_ctx()
    if ctx is None:
        return
    named = ctx.layer_store.named_variables()
    for pattern, types in summary_lists:
        rx = re.compile(pattern)
        for vname, v in named.items():
            if rx.fullmatch(vname) or rx.fullmatch(vname.split("/")[-1]):
                add_tensor_summary(tf.convert_to_tensor(v), types, name="param-summary/" + vname)


# --- tf.summary.* in a tower ---------------------------------------------------------------

def _scoped(name: str) -> str:
    scope = current_scope_name()
    return f"{scope}/{name}" if scope else name


def _capture_scalar(ctx, name, data, *_, **__):
    t = tf.convert_to_tensor(data)
    if t.shape.rank not in (0, None):
        raise ValueError(f"tf.summary.scalar({name!r}) takes a scalar; got shape {t.shape}.")
    ctx.moving_summaries[_scoped(name)] = tf.cast(tf.reshape(t, []), tf.float32)


def _capture_histogram(ctx, name, data, *_, **__):
    ctx.tensor_summaries[_scoped(name)] = tf.reshape(tf.cast(data, tf.float32), [-1])


def _image_batch(name, data, max_outputs):
    t = tf.convert_to_tensor(data)
    if t.shape.rank != 4:
        raise ValueError(f"tf.summary.image({name!r}) takes a batch of images [k, h, w, c]; got shape {t.shape}.")
    return t[:max_outputs]


def _capture_image(ctx, name, data, max_outputs=3, *_, **__):
    # floats are read as [0, 1] and integers as their full range, as tf.summary.image does
    t = tf.image.convert_image_dtype(_image_batch(name, data, max_outputs), tf.float32)
    ctx.tensor_summaries[_scoped(name)] = tf.clip_by_value(t, 0.0, 1.0)


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
    t = _image_batch(name, tensor, max_outputs)
    t = tf.image.convert_image_dtype(t, tf.float32) if t.dtype == tf.uint8 else _v1_float_image_to_unit(t)
    ctx.tensor_summaries[_scoped(name)] = t


_CAPTURES = {"scalar": _capture_scalar, "histogram": _capture_histogram, "image": _capture_image}
# tf.compat.v1.summary.*(name, tensor, [max_outputs,] collections=None, family=None): no step
# argument, and float images are rescaled rather than clipped
_CAPTURES_V1 = {"scalar": _capture_scalar, "histogram": _capture_histogram, "image": _capture_image_v1}


def _tower_aware(kind: str, original):
    capture = _CAPTURES[kind]

    @functools.wraps(original)
    def summary_op(name, data, step=None, *args, **kwargs):
        ctx = get_current_tower_context()
        if ctx is None:
            return original(name, data, step, *args, **kwargs)
        if not ctx.is_main_training_tower:
            return tf.constant(False)
        capture(ctx, name, data, *args, **kwargs)
        return tf.constant(True)

    summary_op._kerastrainer_original = original
    return summary_op


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


def _install_tower_summaries() -> None:
    """Route ``tf.summary.scalar/histogram/image`` calls made in a tower to the trainer.

    Both TF2's and TF1's (``tf.compat.v1.summary``, what tensorpack programs call through
    ``from tensorpack import tfv1 as tf``; in TF2 it writes nothing without a default writer).
    """
    for module in {id(m): m for m in (tf.summary, tf.compat.v2.summary)}.values():
        for kind in _CAPTURES:
            fn = getattr(module, kind, None)
            if fn is not None and not hasattr(fn, "_kerastrainer_original"):
                setattr(module, kind, _tower_aware(kind, fn))
    v1 = tf.compat.v1.summary
    for kind in _CAPTURES_V1:
        fn = getattr(v1, kind, None)
        if fn is not None and not hasattr(fn, "_kerastrainer_original"):
            setattr(v1, kind, _tower_aware_v1(kind, fn))


_install_tower_summaries()
