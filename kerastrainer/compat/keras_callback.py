"""tensorpack's ``KerasPhaseCallback``: accepted and warned about (no learning phase in Keras 3)."""
from __future__ import annotations

from ..callbacks.base import Callback
from ..utils import logger

__all__ = ["KerasPhaseCallback"]


class KerasPhaseCallback(Callback):
    """tensorpack's Keras learning-phase switch: accepted, does nothing (Keras 3 has no
    learning phase; Keras layers in a tower already follow the tower's ``is_training``).

    Example::

        callbacks=[KerasPhaseCallback(True), ModelSaver()]   # a tensorpack program, unchanged
    """

    def __init__(self, enable: bool = True):
        self._enable = bool(enable)
        logger.warning("KerasPhaseCallback(%s) does nothing: Keras 3 has no global learning phase; "
                       "Keras layers called in a tower function train in training towers.", enable)
