"""Small name and version helpers of ``tensorpack.tfutils.common``."""
from __future__ import annotations

from typing import Tuple

import tensorflow as tf

__all__ = ["get_op_tensor_name", "get_tf_version_tuple"]


def get_op_tensor_name(name: str) -> Tuple[str, str]:
    """``'prob'`` or ``'prob:0'`` -> ``('prob', 'prob:0')``.

    Example::

        assert get_op_tensor_name('logits:1') == ('logits', 'logits:1')
    """
    if len(name) >= 3 and name[-2] == ":":
        return name[:-2], name
    return name, name + ":0"


def get_tf_version_tuple() -> Tuple[int, int]:
    """TensorFlow's (major, minor) version, e.g. ``(2, 21)``."""
    return tuple(int(x) for x in tf.__version__.split(".")[:2])
