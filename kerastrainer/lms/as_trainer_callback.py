"""``AsTrainerCallback``: the kerastrainer callback protocol of :class:`~kerastrainer.lms.LMS`.

Owns what LMS does at each point of a kerastrainer trainer's loop: at
``_setup_graph`` (after the variables are built, before the train function is
traced) refuse a train function already traced, note the trainer's first batch
size (``QueueInput`` holds one) for 'auto', turn XLA off for the step (one XLA
cluster would fuse the recompute away and ignore the host copies) and apply LMS
to the trainer's model; after the first step, warn when nothing was selected; after
training, undo.

It leaves the work to the class that mixes it in (:class:`~kerastrainer.lms.LMS`),
which provides ``apply(model)``, ``remove()``, ``check_selection()`` and
``note_data_batch(batch)``; the Keras callback protocol is ``as_keras_callback.py``.

Example::

    class LMS(LMSKnobs, AsTrainerCallback, AsKerasCallback):
        ...                         # apply, remove, check_selection, note_data_batch
"""
from __future__ import annotations

from typing import Optional

from ..callbacks.base import Callback

__all__ = ["AsTrainerCallback", "first_batch_size"]


class AsTrainerCallback(Callback):
    """A kerastrainer callback that installs LMS before the train function is traced."""

    _chief_only = False  # every worker traces its own towers

    def _setup_graph(self):
        runner = self.trainer.step_runner
        if runner is not None and runner.traced:
            raise RuntimeError("LMS was set up after the train function was traced; it cannot change "
                               "it any more. Give LMS in TrainConfig(callbacks=[...]) (or call "
                               "lms.apply(model) before training).")
        self.note_data_batch(first_batch_size(self.trainer.input))
        # one XLA cluster would ignore the host copies and fuse away the recompute
        self.trainer.disable_xla("LMS swaps activations to the host and recomputes them, which an "
                                 "XLA-compiled step undoes")
        self.apply(self.trainer.model)

    def _trigger_step(self):
        self.check_selection()

    def _after_train(self):
        self.remove()


def first_batch_size(source, depth: int = 0) -> Optional[int]:
    """The batch size of the first datapoint an InputSource holds, when it holds one (QueueInput)."""
    if source is None or depth > 3:
        return None
    first = getattr(source, "_first", None)
    if first:
        shape = getattr(first[0], "shape", ())
        return int(shape[0]) if len(shape) else None
    for attr in ("input", "_input", "source", "_source"):
        inner = getattr(source, attr, None)
        if inner is not None and inner is not source:
            b = first_batch_size(inner, depth + 1)
            if b is not None:
                return b
    return None
