"""Mirrors ``tensorpack.tfutils.common``: the global step and name helpers."""
from .global_step import get_global_step_value, get_global_step_var
from .tensors import get_op_tensor_name, get_tf_version_tuple

__all__ = ["get_global_step_var", "get_global_step_value", "get_op_tensor_name", "get_tf_version_tuple"]
