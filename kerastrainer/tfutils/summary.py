"""Summaries from inside a tower function.

``add_moving_summary(cost, accuracy)`` records scalars that the trainer returns from
each training call (averaged over the call's steps and the replicas); the
``MovingAverageSummary`` callback smooths them and sends them to the monitors
(``stats.json``, TensorBoard, the console table). Only the main training tower
records, as in tensorpack.

``tf.summary.scalar``, ``tf.summary.histogram`` and ``tf.summary.image`` called in a
training tower (TF2's here; TF1's ``tf.compat.v1.summary``, that tensorpack programs call
through ``tfv1``, in ``compat/summary.py``) are captured the same way (a tower has no summary writer; without
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

import contextlib
import functools
import re
import threading

import tensorflow as tf

from .._internals import install_tf_summary_patch, restore_attributes
from ..utils import logger
from .tower import current_name_scope, get_current_tower_context

__all__ = ["add_moving_summary", "add_tensor_summary", "add_param_summary", "add_activation_summary",
           "summary_name"]


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

def scoped_name(name: str) -> str:
    scope = current_name_scope()
    return f"{scope}/{name}" if scope else name


def capture_scalar(ctx, name, data, *_, **__):
    t = tf.convert_to_tensor(data)
    if t.shape.rank not in (0, None):
        raise ValueError(f"tf.summary.scalar({name!r}) takes a scalar; got shape {t.shape}.")
    ctx.moving_summaries[scoped_name(name)] = tf.cast(tf.reshape(t, []), tf.float32)


def capture_histogram(ctx, name, data, *_, **__):
    ctx.tensor_summaries[scoped_name(name)] = tf.reshape(tf.cast(data, tf.float32), [-1])


def image_batch(name, data, max_outputs):
    t = tf.convert_to_tensor(data)
    if t.shape.rank != 4:
        raise ValueError(f"tf.summary.image({name!r}) takes a batch of images [k, h, w, c]; got shape {t.shape}.")
    return t[:max_outputs]


def _capture_image(ctx, name, data, max_outputs=3, *_, **__):
    # floats are read as [0, 1] and integers as their full range, as tf.summary.image does
    t = tf.image.convert_image_dtype(image_batch(name, data, max_outputs), tf.float32)
    ctx.tensor_summaries[scoped_name(name)] = tf.clip_by_value(t, 0.0, 1.0)


_CAPTURES = {"scalar": capture_scalar, "histogram": capture_histogram, "image": _capture_image}


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


_routing = {"depth": 0, "replaced": []}
_routing_lock = threading.Lock()


@contextlib.contextmanager
def tower_summaries_routed():
    """``tf.summary.scalar/histogram/image`` route to the trainer while a tower is called, and are
    TensorFlow's own again once no tower call is running (replicas trace in threads of their own:
    the routing lasts while any of them is in a tower). Checked at every entry: TF loads
    TensorBoard's ``tf.summary`` lazily, and a later import (Keras's TensorBoard callback) can
    replace the module object, whose calls in a tower would then be lost without a word.
    TF1's ``tf.compat.v1.summary`` is routed by ``kerastrainer/compat/summary.py``."""
    with _routing_lock:
        _routing["depth"] += 1
        _routing["replaced"] += install_tf_summary_patch(_tower_aware, _CAPTURES)
    try:
        yield
    finally:
        with _routing_lock:
            _routing["depth"] -= 1
            if _routing["depth"] == 0:
                restore_attributes(_routing["replaced"])
                _routing["replaced"] = []


def add_activation_summary(x, types=None, name=None, collections=None):
    """Summaries of an activation (rank >= 2), under ``activation-summary/<name>``: its
    sparsity, rms (moving scalars) and histogram by default. Main training tower only.

    Example::

        l = Conv2D('conv0', image, 32, 3)
        add_activation_summary(l, name='conv0')   # activation-summary/conv0/sparsity, .../rms
    """
    ndim = x.shape.ndims
    if ndim is not None and ndim < 2:
        logger.warning("add_activation_summary: %s has rank %d; it takes activations of rank >= 2.",
                       summary_name(x, name), ndim)
        return
    types = ["sparsity", "rms", "histogram"] if types is None else types
    add_tensor_summary(x, types, name="activation-summary/" + summary_name(x, name), collections=collections)
