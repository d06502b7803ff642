"""``BlockSelection``: which blocks an :class:`~kerastrainer.lms.LMS` may touch.

Owns the meaning of the knobs that name blocks: ``blocks`` / ``excl_blocks``
(``fnmatch`` patterns, a pattern also matching the blocks under it, or Keras
layers), TFLMS's scope sets, ``starting_scope`` / ``starting_op_names`` /
``n_tensors`` (read on the blocks in forward order), the choice of a Keras model's
sub-layers as blocks (``blocks=None``: the direct sub-layers that have sub-layers, or
one block per layer of a flat model), the record of every block traced
(``found_blocks``), and the warning when the patterns match nothing.

It leaves the knobs themselves to :class:`~kerastrainer.lms.knobs.LMSKnobs` (read
live, so a property set after construction counts), and what happens to a selected
block (its mode, its run) to :class:`~kerastrainer.lms.LMS` and ``runner.py``.

Example::

    sel = BlockSelection(LMSKnobs('recompute', blocks=['group*'], excl_blocks=['group3']))
    sel.selects('group0/block1'), sel.selects('group3/block0')    # -> True, False
"""
from __future__ import annotations

import fnmatch
from typing import Dict, List, Optional

import keras

from .._internals import layer_draws_random, sublayers
from ..utils import logger

__all__ = ["BlockSelection", "matches"]


def matches(key: str, patterns) -> bool:
    """Whether block ``key`` matches one of ``patterns`` (``fnmatch`` or a parent block's name, or a layer)."""
    for p in patterns:
        if not isinstance(p, str):  # a Keras layer: its block key is its name
            if getattr(p, "name", None) == key:
                return True
            continue
        if fnmatch.fnmatchcase(key, p) or key.startswith(p.rstrip("/") + "/"):
            return True
    return False


class BlockSelection:
    """The blocks ``knobs`` (an :class:`~kerastrainer.lms.knobs.LMSKnobs`) select, and those traced."""

    def __init__(self, knobs):
        self.knobs = knobs
        self.found_blocks: Dict[str, None] = {}  # every block key traced, in forward order
        self._checked = False

    def excluded_patterns(self) -> List:
        return list(self.knobs.excl_blocks) + sorted(self.knobs.excluded_scopes())

    def included_patterns(self) -> Optional[List]:
        """The patterns a block must match; None: every block."""
        incl = sorted(self.knobs.included_scopes())
        if self.knobs.blocks is None and not incl:
            return None
        return list(self.knobs.blocks or []) + incl

    def selects(self, key: str) -> bool:
        """Whether block ``key`` is one LMS may touch (``blocks``, ``excl_blocks`` and TFLMS's scopes)."""
        if matches(key, self.excluded_patterns()):
            return False
        incl = self.included_patterns()
        return incl is None or matches(key, incl)

    def admits(self, key: str) -> bool:
        """Record block ``key`` (met in a trace, in forward order); whether LMS acts on it there."""
        self.found_blocks.setdefault(key, None)
        return self.selects(key) and self._starts_here(key)

    def _starts_here(self, key: str) -> bool:
        """TFLMS's starting_scope / starting_op_names / n_tensors, on blocks in forward order."""
        knobs = self.knobs
        order = list(self.found_blocks)
        start = [p for p in ([knobs.starting_scope] if knobs.starting_scope else []) +
                 sorted(knobs.starting_op_names or ())]
        idx = order.index(key)
        if start:
            first = next((i for i, k in enumerate(order) if matches(k, start)), None)
            if first is None or idx < first:
                return False
            order = order[first:]
            idx -= first
        if knobs.n_tensors >= 0:
            taken = [k for k in order[:idx] if self.selects(k)]
            return len(taken) < knobs.n_tensors
        return True

    def keras_blocks(self, kmodel) -> List:
        """``[(key, layer)]``: the sub-layers of Keras model ``kmodel`` that are blocks."""
        layers = [l for l in sublayers(kmodel, recursive=True)]
        incl = self.included_patterns()
        if incl is None:
            direct = [l for l in sublayers(kmodel, recursive=False)
                      if not isinstance(l, keras.layers.InputLayer)]
            chosen = [l for l in direct
                      if sublayers(l, recursive=False)]
            if not chosen:
                # a flat model (Sequential of plain layers): one block per layer;
                # random layers (Dropout: a SeedGenerator) cannot be recomputed; the output layer's
                # backward pass comes first (nothing to save) and Keras's loss reads its softmax's
                # logits, which a wrapped call would hide
                chosen = [l for l in direct[:-1] if not layer_draws_random(l)]
                left = [l.name for l in direct[:-1] if layer_draws_random(l)]
                logger.info("LMS: Keras model '%s' is flat: one block per layer (%d layers; the output layer "
                            "%s%s stays plain).", kmodel.name, len(chosen), direct[-1].name if direct else "",
                            (", random layers " + ", ".join(left)) if left else "")
            if not chosen:
                raise ValueError(f"LMS: Keras model '{kmodel.name}' has no layer to use as a block; give "
                                 "blocks= (layer names, patterns or layers).")
        else:
            objs = [b for b in incl if isinstance(b, keras.layers.Layer)]
            chosen = [l for l in layers if any(l is o for o in objs) or matches(l.name, incl)]
            if not chosen:
                raise ValueError(f"LMS: no sub-layer of '{kmodel.name}' matches blocks={incl}; "
                                 f"its layers are {[l.name for l in layers][:20]}.")
        excl_objs = [b for b in self.knobs.excl_blocks if isinstance(b, keras.layers.Layer)]
        excl = self.excluded_patterns()
        return [(l.name, l) for l in chosen
                if not any(l is e for e in excl_objs) and not matches(l.name, excl)]

    def check_once(self, used_blocks) -> None:
        """After the first training step: warn when the patterns matched none of the blocks found.

        ``used_blocks``: the blocks that ran under a mode (none is expected of 'auto').
        """
        if self._checked:
            return
        self._checked = True
        if not self.found_blocks:
            logger.warning("LMS found no block in the training step: mark parts of the tower function with "
                           "lms_block(name, fn), or (Keras) give blocks= with layer names.")
        elif not used_blocks and self.knobs.policy != "auto":
            logger.warning("LMS selects none of the %d block(s) found (%s) with blocks=%s, excluded %s%s.",
                           len(self.found_blocks), ", ".join(list(self.found_blocks)[:12]),
                           self.included_patterns(), self.excluded_patterns(),
                           f", starting_scope={self.knobs.starting_scope!r}" if self.knobs.starting_scope else "")
