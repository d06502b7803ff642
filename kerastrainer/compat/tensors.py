"""The old path of tensorpack's name and version helpers; they live in ``tfutils/tensors.py``."""
from ..tfutils.tensors import get_op_tensor_name, get_tf_version_tuple

__all__ = ["get_op_tensor_name", "get_tf_version_tuple"]
