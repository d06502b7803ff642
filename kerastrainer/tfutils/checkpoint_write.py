"""The named checkpoint format: what a checkpoint of a trainer holds, by name, and writing it.

A checkpoint written here is a TF V2 bundle (``.index`` + ``.data-*``) whose keys are
the variables' scoped names, as in tensorpack, so ``tf.train.list_variables(path)``
shows them as they are::

    conv0/W, conv0/b, bn1/gamma, ...           the model (``named_variables()``)
    optimizer/conv0/W/momentums, ...           optimizer slots, keyed by their variable
    optimizer/iterations, optimizer/learning_rate
    global_step, epoch                         the trainer's counters
    _kerastrainer/format                       b'named-v1'

This module owns the names (:func:`checkpoint_variables`), the format's constants and the
writer (:func:`write_checkpoint`, which refuses NaN or Inf weights). Reading a checkpoint is
:mod:`~kerastrainer.tfutils.checkpoint_read`'s, pairing its names with a model's
:mod:`~kerastrainer.tfutils.checkpoint_match`'s, assigning them
:mod:`~kerastrainer.tfutils.checkpoint_load`'s; where checkpoints live in a log directory is
:mod:`~kerastrainer.tfutils.checkpoint_files`'s, and when one is written ``ModelSaver``'s.

Example::

    write_checkpoint(trainer, 'train_log/run/checkpoint-100')
    sorted(checkpoint_variables(trainer))    # ['conv0/W', ..., 'epoch', 'global_step', 'optimizer/...']
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np
import tensorflow as tf

from .._internals import optimizer_slot_lists, optimizer_trainable_variables

__all__ = ["CheckpointWriteError", "NonFiniteWeightsError", "FORMAT_KEY", "FORMAT_NAMED", "OPTIMIZER_PREFIX",
           "COUNTERS", "NONFINITE_WEIGHTS_HINT", "checkpoint_variables", "write_checkpoint", "nonfinite_names"]

FORMAT_KEY = "_kerastrainer/format"
FORMAT_NAMED = b"named-v1"
OPTIMIZER_PREFIX = "optimizer/"
COUNTERS = ("global_step", "epoch")
_OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"

NONFINITE_WEIGHTS_HINT = (
    "The weights went NaN or Inf through a step: with a finite cost that is usually NaN or Inf in the "
    "input data (TerminateOnNonFinite, a default callback, names the first such step and whether only "
    "the gradients were non-finite); else lower the learning rate or clip gradients.")


class NonFiniteWeightsError(ValueError):
    """Weights to be saved (or found in a checkpoint) hold NaN or Inf."""


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (disk full, file too large, no permission, the
    directory gone); the latest checkpoint is the one before it. An ``OSError``, as the
    failure it reports."""


def _vid(v) -> int:
    """Identity of a variable object (a Keras variable keeps its identity when the trainer swaps
    the ``tf.Variable`` inside it onto a strategy)."""
    return id(v)


def _is_variable(v) -> bool:
    return isinstance(v, tf.Variable) or (hasattr(v, "assign") and hasattr(v, "shape") and hasattr(v, "dtype"))


def _shape(v) -> Tuple[int, ...]:
    return tuple(int(d) for d in v.shape)


def _optimizer_chain(opt) -> list:
    chain = []
    while opt is not None and all(opt is not o for o in chain):
        chain.append(opt)
        opt = getattr(opt, "inner_optimizer", None)
    return chain


def _short_name(v) -> str:
    return str(getattr(v, "name", "var")).split(":")[0].split("/")[-1]


def _optimizer_variables(opt, name_of: Dict[int, str], base: str = OPTIMIZER_PREFIX) -> Dict[str, object]:
    """``{'optimizer/<var name>/<slot>': slot, 'optimizer/iterations': ...}`` of a Keras optimizer
    (``base`` in place of ``'optimizer/'``: ``'optimizer/<objective>/'`` with several).

    A slot list is an attribute holding one variable of its reference's shape per
    trainable variable (Keras' ``_momentums``, ``_velocities``...); its entries are keyed
    by the name of the variable they belong to, so they follow it whatever the creation
    order. Other optimizer variables (the step, the learning rate, factored slots of
    another shape) are keyed by their own short names.
    """
    out: Dict[str, object] = {}
    claimed = set()
    chain = _optimizer_chain(opt)
    for depth in reversed(range(len(chain))):  # innermost first: a wrapper also lists its inner variables
        o = chain[depth]
        # the optimizer that owns the slots is 'optimizer/' whatever wraps it (a loss-scale wrapper
        # with fp16): a checkpoint then loads under either precision
        prefix = base if depth == len(chain) - 1 else f"{base}{type(o).__name__}/"
        tvars = optimizer_trainable_variables(o)
        tids = {_vid(v) for v in tvars}
        if tvars:
            for slot, val in optimizer_slot_lists(o):
                if len(val) != len(tvars):
                    continue
                # one variable of its reference's shape per trainable variable (None where it has none)
                if not any(v is not None for v in val) or not all(
                        v is None or (_is_variable(v) and _vid(v) not in tids and _shape(v) == _shape(ref))
                        for v, ref in zip(val, tvars)):
                    continue
                for i, (ref, sv) in enumerate(zip(tvars, val)):
                    if sv is None or _vid(sv) in claimed:
                        continue
                    ref_name = name_of.get(_vid(ref), f"_unnamed_{i}")
                    out[f"{base}{ref_name}/{slot}"] = sv
                    claimed.add(_vid(sv))
        for v in list(getattr(o, "variables", None) or []):
            if _vid(v) in claimed or _vid(v) in tids:
                continue
            key = prefix + _short_name(v)
            n = 1
            while key in out:
                n += 1
                key = f"{prefix}{_short_name(v)}_{n}"
            out[key] = v
            claimed.add(_vid(v))
    return out


def _counter_vars(target) -> Dict[str, object]:
    ckpt = getattr(target, "checkpoint", None)
    out = {}
    for name in COUNTERS:
        v = getattr(target, f"{name}_var", None)
        if v is None and ckpt is not None:
            v = getattr(ckpt, name, None)
        if v is not None and _is_variable(v):
            out[name] = v
    return out


def checkpoint_variables(target, model_only: bool = False) -> Dict[str, object]:
    """Every variable a checkpoint of ``target`` holds, by name (see the module doc).

    ``target`` has ``named_variables()`` (a trainer or a predictor), and may have
    ``optimizer``, ``global_step_var`` and ``epoch_var``.
    """
    model = dict(target.named_variables())
    out = dict(model)
    if model_only:
        return out
    name_of = {}
    for name, v in model.items():
        name_of.setdefault(_vid(v), name)
    extra = dict(_counter_vars(target))
    several = getattr(target, "named_optimizers", None)
    opt = getattr(target, "optimizer", None)
    if several:   # a model with Objectives: each optimizer under its objective's name
        for name, o in several.items():
            extra.update(_optimizer_variables(o, name_of, f"{OPTIMIZER_PREFIX}{name}/"))
    elif opt is not None:
        extra.update(_optimizer_variables(opt, name_of))
    clash = sorted(set(out) & set(extra))
    if clash:
        raise ValueError(f"Model variables {clash} have the names the checkpoint uses for the optimizer or "
                         "the counters; rename those layers or variables.")
    out.update(extra)
    return out


def _float_dtype(dtype) -> bool:
    return tf.as_dtype(dtype).is_floating


def nonfinite_names(values: Dict[str, object]) -> List[str]:
    """The names whose (float) values hold NaN or Inf; values are arrays, tensors or variables."""
    bad, tensor_names, flags = [], [], []
    for name, v in values.items():
        if isinstance(v, np.ndarray):
            if v.dtype.kind == "f" and not np.isfinite(v).all():
                bad.append(name)
        elif _float_dtype(v.dtype):
            tensor_names.append(name)
            flags.append(tf.reduce_all(tf.math.is_finite(tf.convert_to_tensor(v))))
    if flags:  # one transfer for all the flags
        bad += [n for n, good in zip(tensor_names, tf.stack(flags).numpy()) if not good]
    return sorted(bad)


def write_checkpoint(target, prefix: str, check_finite: bool = True) -> List[str]:
    """Write every variable of ``target`` by name to the checkpoint ``prefix``; returns the names.

    Raises :class:`NonFiniteWeightsError` (naming the variables) and writes nothing
    when ``check_finite`` and a value holds NaN or Inf.
    """
    variables = checkpoint_variables(target)
    names = sorted(variables)
    with tf.device("/cpu:0"):
        tensors = [tf.identity(tf.convert_to_tensor(variables[n])) for n in names]
    if check_finite:
        bad = nonfinite_names(dict(zip(names, tensors)))
        if bad:
            raise NonFiniteWeightsError(
                f"{len(bad)} variable(s) hold NaN or Inf: {', '.join(bad)}. The model diverged; "
                "nothing was saved. " + NONFINITE_WEIGHTS_HINT)
    names.append(FORMAT_KEY)
    tensors.append(tf.constant(FORMAT_NAMED))
    with tf.device("/cpu:0"):
        tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                          tensors=tensors)
    return names[:-1]
