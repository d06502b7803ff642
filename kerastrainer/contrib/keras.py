"""Mirrors ``tensorpack.contrib.keras``: KerasPhaseCallback (a no-op) and KerasModel."""
from ..compat.keras_callback import KerasPhaseCallback
from ..keras import KerasModel

__all__ = ["KerasPhaseCallback", "KerasModel"]
