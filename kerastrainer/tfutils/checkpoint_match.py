"""Pairing a checkpoint's names with a model's: by name, and by structure where Keras's automatic
names differ.

This module owns the comparison (:func:`match_report`: matched, missing, unexpected and
mismatched names) and the pairing of names that differ only in Keras's auto-numbering (the
same architecture built again in one process: ``conv2d_4/kernel`` in the model,
``conv2d_3/kernel`` in the checkpoint; :func:`match_by_structure`), optimizer slots following
their variable (:func:`rename_by_structure`). What to do with the result (assign, warn,
refuse) is :mod:`~kerastrainer.tfutils.checkpoint_load`'s; the names themselves are
:mod:`~kerastrainer.tfutils.checkpoint_write`'s.

Example::

    match_by_structure({'conv2d_4/kernel': v}, {'conv2d_3/kernel': a})   # {'conv2d_4/kernel': 'conv2d_3/kernel'}
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from ..utils import logger
from .checkpoint_write import _OBJECT_GRAPH_KEY, COUNTERS, OPTIMIZER_PREFIX, _shape

__all__ = ["match_report", "match_by_structure", "rename_by_structure"]


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
