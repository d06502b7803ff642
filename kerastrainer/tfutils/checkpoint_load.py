"""Loading a checkpoint into a model: saved arrays assigned to its variables by name.

Loading matches names, never creation order: a model whose layers are created in
another order loads correctly, and every missing, unexpected and mismatched name
is reported at once. Where names differ only in Keras's auto-numbering the variables are
paired by structure first (:mod:`~kerastrainer.tfutils.checkpoint_match`). A variable
of the model left unrestored is an error (so is a mismatched shape) unless the load
is partial on purpose (``ignore_mismatch=True``: one warning naming them);
checkpoint entries the model has no variable for are a warning. The saved optimizer is
compared with the code's (another optimizer starts afresh; a differing hyper-parameter is
the checkpoint's or the code's, ``hyperparams=``).

This module owns that decision and the assignment (:func:`assign_by_name`,
:func:`assign_saved_value`: a cast that would change a value is refused). Reading the file
is :mod:`~kerastrainer.tfutils.checkpoint_read`'s, the names
:mod:`~kerastrainer.tfutils.checkpoint_write`'s; which file to load and from what
(``SmartInit``, auto-resume) is :mod:`~kerastrainer.tfutils.sessinit`'s. Checkpoints of the
earlier, creation-order format (a ``tf.train.Checkpoint`` object graph) are read there
through the model's ``tf.train.Checkpoint``.

Example::

    arrays = load_chkpt_vars('train_log/run/checkpoint-100')
    assign_by_name(predictor_target, arrays, source='checkpoint-100', model_only=True)
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np
import tensorflow as tf

from ..utils import logger
from ..utils.casting import cast_exactly, float_rounding
from .checkpoint_match import match_report, rename_by_structure
from .checkpoint_read import CheckpointLoadError
from .checkpoint_write import COUNTERS, OPTIMIZER_PREFIX, _shape, checkpoint_variables

__all__ = ["HYPERPARAMS_FROM", "assign_by_name", "assign_saved_value", "warn_rounded"]

HYPERPARAMS_FROM = ("checkpoint", "code")


def _split(names: List[str]) -> Tuple[List[str], List[str]]:
    model = [n for n in names if not n.startswith(OPTIMIZER_PREFIX) and n not in COUNTERS]
    return model, [n for n in names if n not in model]


def _is_optimizer_slot(name: str) -> bool:
    return name.startswith(OPTIMIZER_PREFIX) and name.count("/") >= 2


def _slot_kinds(names) -> set:
    """The slot names (``momentum``, ``m``, ``v``...) among ``names``: what tells an optimizer's class."""
    return {n.rsplit("/", 1)[1] for n in names if _is_optimizer_slot(n)}


def _reconcile_optimizer(wanted: Dict[str, object], arrays: Dict[str, np.ndarray], source: str,
                         hyperparams: str) -> Dict[str, np.ndarray]:
    """The checkpoint's entries to load, once the code's optimizer is compared with the saved one.

    - Another optimizer (its slots differ: Adam's m/v against SGD's momentum): none of the saved
      optimizer's state or hyper-parameters is loaded; the code's optimizer starts afresh. Warned.
    - The same optimizer, a hyper-parameter (``learning_rate``...) whose saved value differs from
      the code's: the checkpoint's wins (``hyperparams='checkpoint'``, tensorpack's and Keras's
      resume rule) or the code's (``'code'``); either way a warning names both values.
    """
    saved_opt = [k for k in arrays if k.startswith(OPTIMIZER_PREFIX)]
    code_opt = [k for k in wanted if k.startswith(OPTIMIZER_PREFIX)]
    if not saved_opt or not code_opt:
        return arrays
    saved_kinds, code_kinds = _slot_kinds(saved_opt), _slot_kinds(code_opt)
    if saved_kinds != code_kinds:
        logger.warning("Loading '%s': its optimizer state is of another optimizer (slots: %s) than the code's "
                       "(slots: %s). None of it is loaded, hyper-parameters included: the code's optimizer starts "
                       "afresh with its own settings.", source, ", ".join(sorted(saved_kinds)) or "none",
                       ", ".join(sorted(code_kinds)) or "none")
        for k in code_opt:
            wanted.pop(k)
        return {k: v for k, v in arrays.items() if not k.startswith(OPTIMIZER_PREFIX)}
    out = dict(arrays)
    for k in code_opt:
        if _is_optimizer_slot(k) or k.rsplit("/", 1)[1] in ("iteration", "iterations") or k not in arrays:
            continue
        code_value = np.asarray(wanted[k].numpy())
        saved_value = np.asarray(arrays[k])
        if code_value.shape != saved_value.shape or np.allclose(code_value, saved_value, rtol=1e-6, atol=0):
            continue
        name = k[len(OPTIMIZER_PREFIX):]
        if hyperparams == "code":
            out.pop(k)
            wanted.pop(k)
            logger.warning("Loading '%s': %s is %s in the code's optimizer and %s in the checkpoint: the code's "
                           "value is used (hyperparams='code').", source, name, _show(code_value), _show(saved_value))
        else:
            logger.warning("Loading '%s': %s is %s in the checkpoint and %s in the code's optimizer: the "
                           "checkpoint's value is used, as a resumed run continues where it stopped (a "
                           "hyper-parameter schedule then sets it as usual). To use the code's value, pass "
                           "hyperparams='code' to AutoResumeTrainConfig or SmartInit.", source, name,
                           _show(saved_value), _show(code_value))
    return out


def _reconcile_optimizers(target, wanted: Dict[str, object], arrays: Dict[str, np.ndarray], source: str,
                          hyperparams: str) -> Dict[str, np.ndarray]:
    """:func:`_reconcile_optimizer` for each optimizer of ``target``: its only one, or each
    objective's (``optimizer/<name>/...``), compared with the checkpoint's of the same name."""
    several = getattr(target, "named_optimizers", None)
    if not several:
        return _reconcile_optimizer(wanted, arrays, source, hyperparams)
    out = {k: v for k, v in arrays.items() if not k.startswith(OPTIMIZER_PREFIX)}
    for name in several:
        base = f"{OPTIMIZER_PREFIX}{name}/"

        def local(d):
            return {OPTIMIZER_PREFIX + k[len(base):]: v for k, v in d.items() if k.startswith(base)}
        code, saved = local(wanted), local(arrays)
        kept = _reconcile_optimizer(code, saved, f"{source} (optimizer '{name}')", hyperparams)
        for k in [k for k in wanted if k.startswith(base)]:
            if OPTIMIZER_PREFIX + k[len(base):] not in code:
                wanted.pop(k)   # the code's optimizer starts afresh there, or keeps its value
        out.update({base + k[len(OPTIMIZER_PREFIX):]: v for k, v in kept.items()})
    # saved entries of optimizers the code no longer has stay, as unexpected names
    ours = tuple(f"{OPTIMIZER_PREFIX}{n}/" for n in several)
    out.update({k: v for k, v in arrays.items() if k.startswith(OPTIMIZER_PREFIX) and not k.startswith(ours)})
    return out


def _show(value: np.ndarray) -> str:
    """A hyper-parameter's value as a user wrote it (1e-4, not 9.999999747378752e-05)."""
    if value.ndim == 0 and value.dtype.kind == "f":
        return f"{float(value):.7g}"
    return str(value.tolist())


def _with_shapes(names: List[str], values: Dict[str, object]) -> str:
    """``'conv2d/kernel [3, 3, 1, 8], ...'``: a shape tells a layer apart when names do not."""
    return ", ".join(f"{n} {list(_shape(values[n]))}" for n in names)


def assign_by_name(target, arrays: Dict[str, np.ndarray], source: str, model_only: bool = False,
                   strict: bool = False, hyperparams: str = "checkpoint", ignore_mismatch: bool = False) -> int:
    """Assign saved arrays to ``target``'s variables by name; returns how many were assigned.

    Names that differ only in Keras's auto-numbering are paired by structure first
    (:func:`match_by_structure`). Every problem is reported in one message: a mismatched
    shape or a variable of the model the checkpoint does not restore raises
    :class:`CheckpointLoadError` listing every unmatched variable of the model and of the
    checkpoint, unless ``ignore_mismatch`` (a partial load on purpose: one warning, those
    variables keep their values). Checkpoint variables the model lacks are a warning, or an
    error when ``strict`` (a resumed run must continue the same model). With ``model_only``
    the optimizer's and the counters' entries are neither loaded nor reported; optimizer
    state that does not match is a warning (the optimizer starts afresh there).
    ``hyperparams``: which learning rate (and other optimizer hyper-parameter) wins where the
    code and the checkpoint differ; see :func:`_reconcile_optimizer`.
    """
    if hyperparams not in HYPERPARAMS_FROM:
        raise ValueError(f"hyperparams must be one of {HYPERPARAMS_FROM}; got {hyperparams!r}")
    wanted = checkpoint_variables(target, model_only=model_only)
    if model_only:
        arrays = {k: v for k, v in arrays.items() if not (k.startswith(OPTIMIZER_PREFIX) or k in COUNTERS)}
    arrays, shadowed = rename_by_structure(wanted, arrays, source)
    if not model_only:
        arrays = _reconcile_optimizers(target, wanted, arrays, source, hyperparams)
    matched, missing, unexpected, mismatched = match_report(wanted, arrays)
    missing_model, missing_other = _split(missing)
    unexpected_model, unexpected_other = _split(unexpected)
    lines = []
    if mismatched:
        lines.append(f"{len(mismatched)} variable(s) have another shape in the checkpoint"
                     + (" (ignore_mismatch: not loaded)" if ignore_mismatch else "") + ": " + ", ".join(
                         f"{n} (model {list(ms)}, checkpoint {list(cs)})" for n, ms, cs in mismatched))
    if missing_model:
        lines.append(f"{len(missing_model)} variable(s) of the model are not in the checkpoint: "
                     + _with_shapes(missing_model, wanted))
    if unexpected_model or shadowed:
        lines.append(f"{len(unexpected_model) + len(shadowed)} variable(s) of the checkpoint are not in the model: "
                     + ", ".join(filter(None, [_with_shapes(unexpected_model, arrays),
                                               ", ".join(f"{n} (its name matched by another)" for n in shadowed)])))
    other = missing_other + unexpected_other
    if other:
        lines.append(f"optimizer state or counters that do not match ({len(missing_other)} missing, "
                     f"{len(unexpected_other)} unexpected): " + ", ".join(other))
    if ((mismatched or missing_model) and not ignore_mismatch) or (strict and (missing_model or unexpected_model
                                                                              or shadowed)):
        hint = ("The checkpoint was written by a different model: use a new log directory, or load "
                "its weights on purpose with session_init=SmartInit(path, ignore_mismatch=True)." if strict else
                "Check the model definition (the same code builds the same variables). To load only the "
                "matching variables on purpose, the others keeping their values, use "
                "SmartInit(path, ignore_mismatch=True), or a dict / .npz of the arrays to load.")
        raise CheckpointLoadError(f"Checkpoint '{source}' does not fit the model:\n  " + "\n  ".join(lines)
                                  + f"\n{hint}")
    if lines:
        logger.warning("Loading '%s': %s\nThose variables keep their current values.", source,
                       "\n  ".join([""] + lines))
    rounded: List[str] = []
    for name in matched:
        assign_saved_value(wanted[name], arrays[name], name, f"Checkpoint '{source}'", rounded)
    warn_rounded(source, rounded)
    return len(matched)


def assign_saved_value(var, value, name: str, what: str, rounded: List[str]) -> None:
    """``var.assign(value)`` in the variable's dtype. A cast that changes a value out of range (an
    int64 into int32 that wraps, a float32 1e5 into float16) raises :class:`CheckpointLoadError`;
    floats rounded to a narrower float are assigned and described in ``rounded`` (for one warning)."""
    val = np.asarray(value)
    want = np.dtype(tf.as_dtype(var.dtype).as_numpy_dtype)
    if val.dtype != want:
        val = cast_exactly(val, want, f"{what}: variable '{name}'", CheckpointLoadError)
        change = float_rounding(np.asarray(value), want)
        if change is not None:
            rounded.append(f"{name} ({np.asarray(value).dtype.name} -> {want.name}: {change[0]} of {val.size} "
                           f"values changed, by up to {change[1]:.3g})")
    var.assign(val)


def warn_rounded(source: str, rounded: List[str]) -> None:
    """One warning naming every variable whose saved values were rounded on load."""
    if rounded:
        logger.warning("Loading '%s': %d variable(s) of the model have a narrower float dtype than their saved "
                       "values, which were rounded: %s. To keep the saved values, build the model in the saved "
                       "dtype (its dtype policy), or convert the weights on purpose before loading.",
                       source, len(rounded), ", ".join(rounded))
