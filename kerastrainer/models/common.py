"""Mirrors ``tensorpack.models.common``: layer registration, VariableHolder, logging switch."""
from ._shape_log import disable_layer_logging
from .registry import VariableHolder, layer_register
from .tflayer import rename_tflayer_get_variable

__all__ = ["layer_register", "VariableHolder", "rename_tflayer_get_variable", "disable_layer_logging"]
