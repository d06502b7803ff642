"""``KerasPatches``: the Keras models an :class:`~kerastrainer.lms.LMS` patched, and undoing it.

Owns the edit of a Keras model: each block sub-layer's ``call`` is replaced by one
that runs the original as an LMS block (in a training trace, outside any other
block, with tensor arguments; plainly otherwise), the original kept on the layer as
``_lms_original_call`` (a layer wrapped by another LMS is refused), and the undo:
the original ``call`` back, and the train function Keras cached with LMS dropped so
that it is traced again.

It leaves which sub-layers are blocks to ``selection.py``, and what a block's run
means (its mode, the batch it notes) to the ``lms`` it is given: any object with
``profiling_here()``, ``note_batch(tensors)``, ``mode_for(key)`` and
``run_block(key, fn, args, kwargs, mode=, reenter=)`` (an :class:`~kerastrainer.lms.LMS`).

Example::

    patches = KerasPatches()
    patches.wrap(kmodel, selection.keras_blocks(kmodel), lms)
    ...
    patches.undo()
"""
from __future__ import annotations

from typing import List

import tensorflow as tf

from .blocks import current_block_key, inside_block

__all__ = ["KerasPatches"]


def _lms_call(orig, key: str, lms):
    """The ``call`` of a block sub-layer: ``orig`` run as block ``key`` of ``lms``."""
    def call(*args, **kwargs):
        training = kwargs.get("training", None)
        flat = tf.nest.flatten(args)
        if training is False or current_block_key() is not None or \
                not any(isinstance(t, tf.Tensor) for t in flat):
            return orig(*args, **kwargs)
        if not lms.profiling_here():
            lms.note_batch(flat)
        mode = lms.mode_for(key)
        if mode is None:
            return orig(*args, **kwargs)
        with inside_block(key):
            return lms.run_block(key, orig, args, kwargs, mode=mode, reenter=lambda: inside_block(key))
    return call


class KerasPatches:
    """The layers and Keras models one LMS patched."""

    def __init__(self):
        self.layers: List = []
        self.models: List = []

    def holds(self, kmodel) -> bool:
        """Whether ``kmodel`` is patched already."""
        return any(m is kmodel for m in self.models)

    def wrap(self, kmodel, blocks, lms) -> None:
        """Wrap the ``call`` of each ``(key, layer)`` of ``blocks`` (sub-layers of ``kmodel``)."""
        for key, layer in blocks:
            if getattr(layer, "_lms_original_call", None) is not None:
                raise ValueError(f"LMS: layer '{key}' is already wrapped by an LMS; call remove() on "
                                 "that one first.")
            orig = layer.call
            object.__setattr__(layer, "call", _lms_call(orig, key, lms))
            object.__setattr__(layer, "_lms_original_call", orig)
            self.layers.append(layer)
        self.models.append(kmodel)

    def undo(self) -> None:
        """Put every original ``call`` back; drop the train functions traced with LMS."""
        for layer in self.layers:
            object.__setattr__(layer, "call", layer._lms_original_call)
            object.__setattr__(layer, "_lms_original_call", None)
        self.layers = []
        for kmodel in self.models:
            # the cached train function was traced with LMS: trace again without it
            if getattr(kmodel, "train_function", None) is not None:
                kmodel.train_function = None
        self.models = []
