"""Checkpoints keyed by variable name: write them, read them, match them to a model.

A checkpoint written here is a TF V2 bundle (``.index`` + ``.data-*``) whose keys are
the variables' scoped names, as in tensorpack, so ``tf.train.list_variables(path)``
shows them as they are::

    conv0/W, conv0/b, bn1/gamma, ...           the model (``named_variables()``)
    optimizer/conv0/W/momentums, ...           optimizer slots, keyed by their variable
    optimizer/iterations, optimizer/learning_rate
    global_step, epoch                         the trainer's counters
    _kerastrainer/format                       b'named-v1'

Loading matches names, never creation order: a model whose layers are created in
another order loads correctly, and every missing, unexpected and mismatched name
is reported at once. Where names differ only in Keras's auto-numbering (the same
architecture built again in one process: ``conv2d_4/kernel`` in the model,
``conv2d_3/kernel`` in the checkpoint), the variables are paired by structure
(:func:`match_by_structure`), optimizer slots following their variable. A variable
of the model left unrestored is an error (so is a mismatched shape) unless the load
is partial on purpose (``ignore_mismatch=True``: one warning naming them);
checkpoint entries the model has no variable for are a warning.

Checkpoints of the earlier, creation-order format (a ``tf.train.Checkpoint`` object
graph) are still read through the model's ``tf.train.Checkpoint``.

Example::

    write_checkpoint(trainer, 'train_log/run/checkpoint-100')
    arrays = load_chkpt_vars('train_log/run/checkpoint-100')   # {'conv0/W': ndarray, ...}
    assign_by_name(predictor_target, arrays, source='checkpoint-100', model_only=True)
"""
from __future__ import annotations

import glob
import os
import re
from typing import Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from .._internals import optimizer_slot_lists, optimizer_trainable_variables
from ..utils import logger
from ..utils.casting import cast_exactly, float_rounding
from .checkpoint_files import get_checkpoint_path, list_checkpoints

__all__ = ["CheckpointLoadError", "CheckpointWriteError", "NonFiniteWeightsError", "FORMAT_KEY", "FORMAT_NAMED",
           "checkpoint_variables", "write_checkpoint", "load_chkpt_vars", "is_named_format",
           "nonfinite_names", "assign_by_name", "match_report", "match_by_structure", "rename_by_structure",
           # tensorpack's names at this path
           "get_checkpoint_path", "get_all_checkpoints", "load_checkpoint_vars", "save_chkpt_vars",
           "save_checkpoint_vars", "dump_session_params", "SessionUpdate"]

FORMAT_KEY = "_kerastrainer/format"
FORMAT_NAMED = b"named-v1"
OPTIMIZER_PREFIX = "optimizer/"
COUNTERS = ("global_step", "epoch")
_OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"


class CheckpointLoadError(RuntimeError):
    """A checkpoint or weight file cannot be loaded into the model."""


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


def _files_of(prefix: str) -> str:
    data = sorted(glob.glob(glob.escape(prefix) + ".data-*"))
    return ", ".join([prefix + ".index"] + data)


def _first_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return f"{type(e).__name__}: {s[0] if s else ''}"


def load_chkpt_vars(path: str) -> Dict[str, np.ndarray]:
    """Every tensor of the checkpoint at ``path`` (a prefix), by key, as numpy values.

    Reads every byte, so a truncated or damaged file is found here: raises
    :class:`CheckpointLoadError` naming the file. (tensorpack's name.)
    """
    index = path + ".index"
    try:
        size = os.path.getsize(index)
    except FileNotFoundError:
        raise CheckpointLoadError(f"Checkpoint '{path}' does not exist ({index} is missing).") from None
    if size == 0:
        raise CheckpointLoadError(f"Checkpoint index file {index} is empty (a write was cut short). "
                                  "Load an earlier checkpoint of the directory.")
    try:
        reader = tf.train.load_checkpoint(path)
        shapes = reader.get_variable_to_shape_map()
    except Exception as e:  # noqa: BLE001 - any failure of the index is the file's fault
        raise CheckpointLoadError(f"Checkpoint index file {index} is corrupt or not a TF checkpoint "
                                  f"({_first_line(e)}). Load an earlier checkpoint of the directory.") from e
    out = {}
    for key in sorted(shapes):
        try:
            out[key] = np.asarray(reader.get_tensor(key))
        except Exception as e:  # noqa: BLE001
            raise CheckpointLoadError(
                f"Checkpoint '{path}' is corrupt: its data ({_files_of(path)}) cannot be read for "
                f"'{key}' ({_first_line(e)}). Load an earlier checkpoint of the directory.") from e
    return out


def is_named_format(arrays: Dict[str, object]) -> bool:
    v = arrays.get(FORMAT_KEY)
    if v is None:
        return False
    if isinstance(v, np.ndarray):
        v = v.item()
    return v == FORMAT_NAMED


def _shape(v) -> Tuple[int, ...]:
    return tuple(int(d) for d in v.shape)


def match_report(wanted: Dict[str, object], arrays: Dict[str, np.ndarray]):
    """``(matched, missing, unexpected, mismatched)`` of a model's variables against saved arrays.

    ``mismatched`` lists ``(name, model shape, saved shape)``.
    """
    saved = {k: v for k, v in arrays.items() if not k.startswith("_kerastrainer/") and k != _OBJECT_GRAPH_KEY}
    matched, mismatched = [], []
    for name in sorted(set(wanted) & set(saved)):
        ms, cs = _shape(wanted[name]), _shape(np.asarray(saved[name]))
        (matched if ms == cs else mismatched).append(name if ms == cs else (name, ms, cs))
    missing = sorted(set(wanted) - set(saved))
    unexpected = sorted(set(saved) - set(wanted))
    return matched, missing, unexpected, mismatched


def _split(names: List[str]) -> Tuple[List[str], List[str]]:
    model = [n for n in names if not n.startswith(OPTIMIZER_PREFIX) and n not in COUNTERS]
    return model, [n for n in names if n not in model]


HYPERPARAMS_FROM = ("checkpoint", "code")

NONFINITE_WEIGHTS_HINT = (
    "The weights went NaN or Inf through a step: with a finite cost that is usually NaN or Inf in the "
    "input data (TerminateOnNonFinite, a default callback, names the first such step and whether only "
    "the gradients were non-finite); else lower the learning rate or clip gradients.")


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


# --- pairing by structure where Keras's automatic names differ ----------------------------------
_AUTO_NUMBERED = re.compile(r"(.+?)_(\d+)")


def _structure_key(name: str) -> Tuple[str, Tuple[int, ...]]:
    """``('keras_model/conv2d/kernel', (-1, 3))`` for ``'keras_model/conv2d_3/kernel'``: the name with
    each layer's auto-number stripped (the last part, the variable's role, is kept whole), and the
    numbers, which order the layers of one kind as Keras numbered them (in creation order)."""
    parts = name.split("/")
    canon, numbers = [], []
    for part in parts[:-1]:
        m = _AUTO_NUMBERED.fullmatch(part)
        canon.append(m.group(1) if m else part)
        numbers.append(int(m.group(2)) if m else -1)
    return "/".join(canon + parts[-1:]), tuple(numbers)


def _dtype_name(v) -> Optional[str]:
    try:
        return tf.as_dtype(v.dtype).name
    except TypeError:
        return None


def match_by_structure(model: Dict[str, object], saved: Dict[str, object]) -> Dict[str, str]:
    """``{model name: checkpoint name}`` pairing variables whose names differ only in Keras's
    auto-numbering (``conv2d_4/kernel`` ~ ``conv2d_3/kernel``); empty when the names leave nothing
    to pair (no variable of the model is missing from ``saved``, or none of ``saved`` is unused).

    Variables are grouped by (name without the auto-numbers, shape, dtype): the layer's kind and
    nesting, the variable's role. A group with as many variables on both sides pairs them in
    the order of their numbers (Keras numbers layers in creation order, and the same code
    creates them in the same order). A name without a number found on both sides with the same
    shape and dtype (a layer the user named) keeps its name match; a group of unequal sizes
    (another architecture) pairs nothing, and its variables are left to matching by name.
    Values are variables or arrays.

    Example::

        match_by_structure({'conv2d_4/kernel': v}, {'conv2d_3/kernel': a})
        # {'conv2d_4/kernel': 'conv2d_3/kernel'}
    """
    if all(n in saved for n in model) or all(n in model for n in saved):
        return {}
    groups: Dict[tuple, Tuple[list, list]] = {}
    for side, (names, other) in enumerate(((model, saved), (saved, model))):
        for n, v in names.items():
            canon, numbers = _structure_key(n)
            if n in other and max(numbers, default=-1) < 0 and _shape(v) == _shape(other[n]) \
                    and _dtype_name(v) == _dtype_name(other[n]):
                continue   # named by the user (or Keras's first of a kind), found by name
            groups.setdefault((canon, _shape(v), _dtype_name(v)), ([], []))[side].append((numbers, n))
    pairs = {}
    for mine, theirs in groups.values():
        if len(mine) == len(theirs):
            pairs.update((m, c) for (_, m), (_, c) in zip(sorted(mine), sorted(theirs)))
    return pairs


def _slot_owner(key: str, names) -> Optional[Tuple[str, str, str]]:
    """``(base, variable name, slot)`` of an optimizer slot key ``<base><variable name>/<slot>``
    whose variable is one of ``names``; ``base`` is ``'optimizer/'`` or ``'optimizer/<objective>/'``."""
    if not key.startswith(OPTIMIZER_PREFIX):
        return None
    head, _, slot = key[len(OPTIMIZER_PREFIX):].rpartition("/")
    if head in names:
        return OPTIMIZER_PREFIX, head, slot
    objective, _, var = head.partition("/")
    if var in names:
        return f"{OPTIMIZER_PREFIX}{objective}/", var, slot
    return None


def rename_by_structure(wanted: Dict[str, object], arrays: Dict[str, np.ndarray],
                        source: str) -> Tuple[Dict[str, np.ndarray], List[str]]:
    """``(arrays keyed by the model's names, names of saved variables left unmatched by a pairing)``:
    the saved model variables that :func:`match_by_structure` pairs with ``wanted``'s (a model's
    variables by name, with optimizer slots or not), and their optimizer slots, renamed to the
    model's names; one info line says how many and shows examples.

    Example::

        arrays, shadowed = rename_by_structure(trainer.named_variables(), load_chkpt_vars(path), path)
    """
    model = {k: v for k, v in wanted.items() if not k.startswith(OPTIMIZER_PREFIX) and k not in COUNTERS}
    saved = {k: v for k, v in arrays.items() if not k.startswith(OPTIMIZER_PREFIX) and k not in COUNTERS
             and not k.startswith("_kerastrainer/") and k != _OBJECT_GRAPH_KEY}
    pairs = {m: c for m, c in match_by_structure(model, saved).items() if m != c}
    if not pairs:
        return arrays, []
    to_model = {c: m for m, c in pairs.items()}
    kept, moved = {}, {}
    for k, v in arrays.items():
        if k in to_model:
            moved[to_model[k]] = v
            continue
        slot = _slot_owner(k, to_model)
        if slot is not None:
            base, var, name = slot
            moved[f"{base}{to_model[var]}/{name}"] = v
        else:
            kept[k] = v
    # a saved variable not paired whose name another pairing took: it matches nothing now
    shadowed = sorted(k for k in kept if k in moved and k in saved)
    kept.update(moved)
    examples = ", ".join(f"{m} <- {c}" for m, c in list(pairs.items())[:2])
    logger.info("Loading '%s': %d variable(s) matched by structure, their automatic layer names differing "
                "(the same architecture built again), e.g. %s.", source, len(pairs), examples)
    return kept, shadowed


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


def counter_of(arrays: Dict[str, np.ndarray], name: str) -> Optional[int]:
    """A counter (``'global_step'``, ``'epoch'``) saved in either checkpoint format."""
    for key in (name, f"{name}/.ATTRIBUTES/VARIABLE_VALUE"):
        if key in arrays:
            return int(np.asarray(arrays[key]))
    return None


# --- tensorpack's helpers at this path ---------------------------------------------------------
def get_all_checkpoints(directory: str) -> List[str]:
    """The complete checkpoints of ``directory``, oldest first (tensorpack's order).

    Example::

        for prefix in get_all_checkpoints('train_log/mnist'): print(prefix)
    """
    return list(reversed(list_checkpoints(directory)))


def load_checkpoint_vars(path: str) -> Dict[str, np.ndarray]:
    """tensorpack's other name of :func:`load_chkpt_vars`."""
    return load_chkpt_vars(path)


def save_chkpt_vars(dic: Dict[str, object], path: str) -> None:
    """Save ``{name: array}`` to ``path``: an ``.npz`` file when the name ends with ``.npz``, else
    a TF checkpoint with those names (what ``load_chkpt_vars`` and ``SmartInit`` read back).

    Example::

        save_chkpt_vars({'fc/W': w, 'fc/b': b}, 'weights.npz')
    """
    arrays = {str(k): np.asarray(v.numpy() if hasattr(v, "numpy") else v) for k, v in dic.items()}
    if path.endswith(".npz"):
        tmp = path + ".tmp.npz"   # written whole, then renamed: never a half-written file under the name
        np.savez(tmp, **arrays)
        os.replace(tmp, path)
        return
    with tf.device("/cpu:0"):
        names = sorted(arrays)
        tf.raw_ops.SaveV2(prefix=path, tensor_names=names, shape_and_slices=[""] * len(names),
                          tensors=[tf.constant(arrays[n]) for n in names])


save_checkpoint_vars = save_chkpt_vars


def dump_session_params(path: str, trainer=None) -> None:
    """Save the model's variables, by name, to ``path`` (``.npz``): tensorpack dumped the session's.

    ``trainer``: whose variables (anything with ``named_variables()``: a trainer, a predictor);
    tensorpack read the default session's, which TF2 does not have.
    """
    if trainer is None:
        raise ValueError("dump_session_params: there is no session in TF2; give the trainer (or a predictor) "
                         "whose variables to save: dump_session_params(path, trainer).")
    save_chkpt_vars(trainer.named_variables(), path)


class SessionUpdate:
    """Assign values to variables by name (tensorpack's): ``update({name: value})``, names as the
    variables' ``v.name`` (``'fc/W:0'``). With a ``tf.compat.v1.Session`` (a TF1 graph-mode program)
    the assignments run in it; with ``sess=None`` (eager variables: a trainer's) they are made
    directly. A value of the variable's size in another shape is reshaped, with a warning, as
    tensorpack did; another size is an error naming the variable.

    Example::

        SessionUpdate(None, trainer.trainable_variables).update({'fc/W:0': w})
    """

    def __init__(self, sess, vars_to_update):
        self.sess = sess
        self.name_map = {v.name: v for v in vars_to_update}

    @staticmethod
    def relaxed_value_for_var(value, var, ignore_mismatch: bool = False):
        """``value`` in ``var``'s shape and dtype (None, with ``ignore_mismatch``, where it cannot be)."""
        name = var.name
        value = np.asarray(value)
        shape = tuple(var.shape.as_list()) if hasattr(var.shape, "as_list") else tuple(var.shape)
        if value.shape != shape:
            if value.size != int(np.prod(shape)):
                if ignore_mismatch:
                    logger.warning("SessionUpdate: %s has shape %s, the value %s; it is not loaded.", name, shape,
                                   value.shape)
                    return None
                raise ValueError(f"SessionUpdate: {name} has shape {shape}, the value {value.shape}.")
            logger.warning("SessionUpdate: the value for %s is reshaped from %s to %s.", name, value.shape, shape)
            value = value.reshape(shape)
        return value.astype(var.dtype.as_numpy_dtype)

    def update(self, prms: Dict[str, object]) -> None:
        """Assign each ``{name: value}`` of ``prms``."""
        unknown = [n for n in prms if n not in self.name_map]
        if unknown:
            raise KeyError(f"SessionUpdate.update: {unknown} are not among the variables to update "
                           f"({sorted(self.name_map)[:10]}...).")
        for name, value in prms.items():
            var = self.name_map[name]
            value = self.relaxed_value_for_var(value, var)
            if self.sess is None:
                var.assign(value)
            else:
                with self.sess.graph.as_default():
                    self.sess.run(var.initializer, feed_dict={var.initializer.inputs[1]: value})
