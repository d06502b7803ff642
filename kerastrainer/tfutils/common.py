"""Mirrors ``tensorpack.tfutils.common``: the global step and name helpers, the environment
report and the TF1 session config (raises)."""
from .global_step import get_global_step_value, get_global_step_var
from .tensors import get_op_tensor_name, get_tf_version_tuple
from .collect_env import collect_env_info
from .sesscreate import get_default_sess_config

__all__ = ["get_global_step_var", "get_global_step_value", "get_op_tensor_name", "get_tf_version_tuple",
           "collect_env_info", "get_default_sess_config"]
