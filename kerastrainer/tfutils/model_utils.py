"""tensorpack's ``tfutils.model_utils``: a table of a model's trainable variables, shape strings."""
from typing import Dict, Optional, Sequence, Union

import numpy as np
import tensorflow as tf

from ..utils import logger

__all__ = ["describe_trainable_vars", "get_shape_str"]


def describe_trainable_vars(variables: Optional[Union[Dict[str, tf.Variable], Sequence[tf.Variable]]] = None,
                            log: bool = True) -> str:
    """Log (and return) a table of trainable variables: name, shape, number of elements, dtype,
    and the totals (elements and MB).

    ``variables``: ``{name: variable}`` (``trainer.named_variables()``), a list of variables, or
    None: the default layer store's (the layers built outside a trainer). tensorpack read the TF1
    graph's collection; TF2 has none, so give the trainer's variables inside a callback.

    Example::

        describe_trainable_vars(self.trainer.named_variables())   # in a callback's _before_train
    """
    if variables is None:
        from .layer_store import get_default_layer_store
        variables = get_default_layer_store().named_variables()
    if isinstance(variables, dict):
        items = [(n, v) for n, v in variables.items() if getattr(v, "trainable", True)]
    else:
        items = [(v.name.split(":")[0], v) for v in variables if getattr(v, "trainable", True)]
    rows, total, total_bytes = [], 0, 0
    for name, v in items:
        shape = tuple(int(d) for d in v.shape)
        n = int(np.prod(shape)) if shape else 1
        dtype = tf.as_dtype(v.dtype)
        total += n
        total_bytes += n * dtype.size
        rows.append((name, str(list(shape)), str(n), dtype.name))
    header = ("name", "shape", "#elements", "dtype")
    widths = [max([len(header[i])] + [len(r[i]) for r in rows]) for i in range(4)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    lines.append(f"Number of trainable variables: {len(rows)}")
    lines.append(f"Number of parameters (elements): {total}")
    lines.append(f"Storage space needed for all trainable variables: {total_bytes / 1024 ** 2:.02f}MB")
    table = "\n".join(lines)
    if log:
        logger.info("Trainable variables:\n%s", table)
    return table


def get_shape_str(tensors) -> str:
    """The shapes of a tensor or a list of tensors as a string: ``'[None, 28, 28]'``, ``'[2,3],[4]'``.

    Example::

        get_shape_str([tf.zeros([2, 3]), tf.zeros([4])])   # '[2, 3],[4]'
    """
    if isinstance(tensors, (list, tuple)):
        for v in tensors:
            if not hasattr(v, "shape"):
                raise TypeError(f"get_shape_str: {v!r} is not a tensor")
        return ",".join(str(v.shape.as_list()) for v in tensors)
    if not hasattr(tensors, "shape"):
        raise TypeError(f"get_shape_str: {tensors!r} is not a tensor")
    return str(tensors.shape.as_list())
