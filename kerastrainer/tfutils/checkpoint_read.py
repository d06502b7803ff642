"""Reading a checkpoint back: every tensor of it as numpy, by key, and what its keys say.

This module owns reading a checkpoint's values (:func:`load_chkpt_vars`, which reads every
byte, so that a damaged file is found and named here), telling its format
(:func:`is_named_format`) and its saved counters (:func:`counter_of`). The names and the
writer are :mod:`~kerastrainer.tfutils.checkpoint_write`'s; matching the values to a model
and assigning them are :mod:`~kerastrainer.tfutils.checkpoint_match`'s and
:mod:`~kerastrainer.tfutils.checkpoint_load`'s.

Example::

    arrays = load_chkpt_vars('train_log/run/checkpoint-100')   # {'conv0/W': ndarray, ...}
    counter_of(arrays, 'global_step')                          # 100
"""
from __future__ import annotations

import glob
import os
from typing import Dict, Optional

import numpy as np
import tensorflow as tf

from .checkpoint_write import FORMAT_KEY, FORMAT_NAMED

__all__ = ["CheckpointLoadError", "load_chkpt_vars", "load_checkpoint_vars", "is_named_format", "counter_of"]


class CheckpointLoadError(RuntimeError):
    """A checkpoint or weight file cannot be loaded into the model."""


def _files_of(prefix: str) -> str:
    data = sorted(glob.glob(glob.escape(prefix) + ".data-*"))
    return ", ".join([prefix + ".index"] + data)


def _first_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return f"{type(e).__name__}: {s[0] if s else ''}"


def load_chkpt_vars(path: str) -> Dict[str, np.ndarray]:
    """Every tensor of the checkpoint at ``path`` (a prefix), by key, as numpy values.

    Reads every byte, so a truncated or damaged file is found here: raises
    :class:`CheckpointLoadError` naming the file. (tensorpack's name.)
    """
    index = path + ".index"
    try:
        size = os.path.getsize(index)
    except FileNotFoundError:
        raise CheckpointLoadError(f"Checkpoint '{path}' does not exist ({index} is missing).") from None
    if size == 0:
        raise CheckpointLoadError(f"Checkpoint index file {index} is empty (a write was cut short). "
                                  "Load an earlier checkpoint of the directory.")
    try:
        reader = tf.train.load_checkpoint(path)
        shapes = reader.get_variable_to_shape_map()
    except Exception as e:  # noqa: BLE001 - any failure of the index is the file's fault
        raise CheckpointLoadError(f"Checkpoint index file {index} is corrupt or not a TF checkpoint "
                                  f"({_first_line(e)}). Load an earlier checkpoint of the directory.") from e
    out = {}
    for key in sorted(shapes):
        try:
            out[key] = np.asarray(reader.get_tensor(key))
        except Exception as e:  # noqa: BLE001
            raise CheckpointLoadError(
                f"Checkpoint '{path}' is corrupt: its data ({_files_of(path)}) cannot be read for "
                f"'{key}' ({_first_line(e)}). Load an earlier checkpoint of the directory.") from e
    return out


def load_checkpoint_vars(path: str) -> Dict[str, np.ndarray]:
    """tensorpack's other name of :func:`load_chkpt_vars`."""
    return load_chkpt_vars(path)


def is_named_format(arrays: Dict[str, object]) -> bool:
    v = arrays.get(FORMAT_KEY)
    if v is None:
        return False
    if isinstance(v, np.ndarray):
        v = v.item()
    return v == FORMAT_NAMED


def counter_of(arrays: Dict[str, np.ndarray], name: str) -> Optional[int]:
    """A counter (``'global_step'``, ``'epoch'``) saved in either checkpoint format."""
    for key in (name, f"{name}/.ATTRIBUTES/VARIABLE_VALUE"):
        if key in arrays:
            return int(np.asarray(arrays[key]))
    return None
