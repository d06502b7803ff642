"""tensorpack's helpers that move variables' values as arrays: save them (``save_chkpt_vars``,
``dump_session_params``) and assign them by name (``SessionUpdate``).

They live at tensorpack's path ``tfutils.varmanip`` (an alias module) and here. This module
owns writing ``{name: array}`` as an ``.npz`` or a TF checkpoint of those names, and assigning
values to variables by ``v.name``; a trainer's own checkpoints are
:mod:`~kerastrainer.tfutils.checkpoint_write`'s, loading weights into a model
:mod:`~kerastrainer.tfutils.checkpoint_load`'s and ``SmartInit``'s.

Example::

    save_chkpt_vars({'fc/W': w, 'fc/b': b}, 'weights.npz')
    SessionUpdate(None, trainer.trainable_variables).update({'fc/W:0': w})
"""
from __future__ import annotations

import os
from typing import Dict

import numpy as np
import tensorflow as tf

from ..utils import logger

__all__ = ["save_chkpt_vars", "save_checkpoint_vars", "dump_session_params", "SessionUpdate"]


def save_chkpt_vars(dic: Dict[str, object], path: str) -> None:
    """Save ``{name: array}`` to ``path``: an ``.npz`` file when the name ends with ``.npz``, else
    a TF checkpoint with those names (what ``load_chkpt_vars`` and ``SmartInit`` read back).

    Example::

        save_chkpt_vars({'fc/W': w, 'fc/b': b}, 'weights.npz')
    """
    arrays = {str(k): np.asarray(v.numpy() if hasattr(v, "numpy") else v) for k, v in dic.items()}
    if path.endswith(".npz"):
        tmp = path + ".tmp.npz"   # written whole, then renamed: never a half-written file under the name
        np.savez(tmp, **arrays)
        os.replace(tmp, path)
        return
    with tf.device("/cpu:0"):
        names = sorted(arrays)
        tf.raw_ops.SaveV2(prefix=path, tensor_names=names, shape_and_slices=[""] * len(names),
                          tensors=[tf.constant(arrays[n]) for n in names])


save_checkpoint_vars = save_chkpt_vars


def dump_session_params(path: str, trainer=None) -> None:
    """Save the model's variables, by name, to ``path`` (``.npz``): tensorpack dumped the session's.

    ``trainer``: whose variables (anything with ``named_variables()``: a trainer, a predictor);
    tensorpack read the default session's, which TF2 does not have.
    """
    if trainer is None:
        raise ValueError("dump_session_params: there is no session in TF2; give the trainer (or a predictor) "
                         "whose variables to save: dump_session_params(path, trainer).")
    save_chkpt_vars(trainer.named_variables(), path)


class SessionUpdate:
    """Assign values to variables by name (tensorpack's): ``update({name: value})``, names as the
    variables' ``v.name`` (``'fc/W:0'``). With a ``tf.compat.v1.Session`` (a TF1 graph-mode program)
    the assignments run in it; with ``sess=None`` (eager variables: a trainer's) they are made
    directly. A value of the variable's size in another shape is reshaped, with a warning, as
    tensorpack did; another size is an error naming the variable.

    Example::

        SessionUpdate(None, trainer.trainable_variables).update({'fc/W:0': w})
    """

    def __init__(self, sess, vars_to_update):
        self.sess = sess
        self.name_map = {v.name: v for v in vars_to_update}

    @staticmethod
    def relaxed_value_for_var(value, var, ignore_mismatch: bool = False):
        """``value`` in ``var``'s shape and dtype (None, with ``ignore_mismatch``, where it cannot be)."""
        name = var.name
        value = np.asarray(value)
        shape = tuple(var.shape.as_list()) if hasattr(var.shape, "as_list") else tuple(var.shape)
        if value.shape != shape:
            if value.size != int(np.prod(shape)):
                if ignore_mismatch:
                    logger.warning("SessionUpdate: %s has shape %s, the value %s; it is not loaded.", name, shape,
                                   value.shape)
                    return None
                raise ValueError(f"SessionUpdate: {name} has shape {shape}, the value {value.shape}.")
            logger.warning("SessionUpdate: the value for %s is reshaped from %s to %s.", name, value.shape, shape)
            value = value.reshape(shape)
        return value.astype(var.dtype.as_numpy_dtype)

    def update(self, prms: Dict[str, object]) -> None:
        """Assign each ``{name: value}`` of ``prms``."""
        unknown = [n for n in prms if n not in self.name_map]
        if unknown:
            raise KeyError(f"SessionUpdate.update: {unknown} are not among the variables to update "
                           f"({sorted(self.name_map)[:10]}...).")
        for name, value in prms.items():
            var = self.name_map[name]
            value = self.relaxed_value_for_var(value, var)
            if self.sess is None:
                var.assign(value)
            else:
                with self.sess.graph.as_default():
                    self.sess.run(var.initializer, feed_dict={var.initializer.inputs[1]: value})
