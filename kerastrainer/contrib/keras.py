"""Mirrors ``tensorpack.contrib.keras``: KerasPhaseCallback (a no-op), KerasModel,
setup_keras_trainer (raises)."""
from ..compat.keras_callback import KerasPhaseCallback
from ..compat.keras_setup import setup_keras_trainer
from ..keras import KerasModel

__all__ = ["KerasPhaseCallback", "setup_keras_trainer", "KerasModel"]
