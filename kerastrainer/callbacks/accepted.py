"""tensorpack callbacks whose job TF2 / kerastrainer already does: accepted, they do nothing.

- ``MergeAllSummaries`` (``tensorpack.callbacks.summary``, re-exported at
  ``kerastrainer.callbacks.summary``): ``tf.summary`` calls and moving summaries of the training
  tower already reach the monitors (stats.json, TensorBoard, the epoch table) every epoch.
- ``RunUpdateOps`` (``tensorpack.callbacks.graph``): there are no UPDATE_OPS in TF2; BatchNorm
  (Keras's and kerastrainer's) updates its statistics inside the training step.

Both are in ``from kerastrainer import *`` (through ``kerastrainer.callbacks``).

Example::

    callbacks=[ModelSaver(), MergeAllSummaries(), RunUpdateOps()]   # a tensorpack program, unchanged
"""
from __future__ import annotations

from ..utils import logger
from .base import Callback

__all__ = ["MergeAllSummaries", "RunUpdateOps"]


class _Accepted(Callback):
    _chief_only = False
    _why = ""

    def __init__(self, *args, **kwargs):
        logger.info("%s does nothing in kerastrainer: %s", type(self).__name__, self._why)


class MergeAllSummaries(_Accepted):
    """Accepted; summaries reach the monitors without it (see the module docstring)."""

    _why = "summaries of the training tower reach the monitors every epoch on their own."


class RunUpdateOps(_Accepted):
    """Accepted; layers update their own state inside the training step."""

    _why = "TF2 has no UPDATE_OPS; BatchNorm updates its statistics inside the training step."
