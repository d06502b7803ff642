"""Loading weights into a model: checkpoints, ``.npz`` files of named arrays, dicts.

A *target* is anything with ``checkpoint`` (a ``tf.train.Checkpoint``) and
``named_variables()`` (``{'conv0/W': variable}``): a trainer or a predictor.

Example::

    SmartInit('train_log/mnist')             # the latest checkpoint of a log dir
    SmartInit('train_log/mnist/checkpoint-1200')
    SmartInit('pretrained.npz')              # arrays named like 'conv0/W'
    SmartInit({'fc/b': np.zeros(10)})
"""
from __future__ import annotations

import os
from typing import Dict, Optional

import numpy as np
import tensorflow as tf

from ..utils import logger
from .checkpoint_files import latest_checkpoint

__all__ = ["SessionInit", "JustCurrentSession", "CheckpointInit", "SaverRestore", "DictRestore",
           "NpzInit", "ChainInit", "SmartInit", "get_checkpoint_path", "CheckpointLoadError"]


class CheckpointLoadError(RuntimeError):
    """A checkpoint or weight file cannot be loaded into the model."""


class SessionInit:
    """Base class: ``init(target)`` loads weights into the target's variables."""

    def init(self, target) -> None:
        self._init(target)

    def _init(self, target):
        raise NotImplementedError


class JustCurrentSession(SessionInit):
    """Load nothing: keep the variables' initial values."""

    def _init(self, target):
        pass


def get_checkpoint_path(path: str) -> str:
    """Resolve a log dir (its latest checkpoint) or a checkpoint prefix to a prefix."""
    if os.path.isdir(path):
        latest = latest_checkpoint(path)
        if latest is None:
            raise FileNotFoundError(f"No checkpoint in directory '{path}' (no 'checkpoint' state file "
                                    "pointing at a complete checkpoint).")
        return latest
    if path.endswith(".index"):
        path = path[: -len(".index")]
    if not os.path.isfile(path + ".index"):
        raise FileNotFoundError(f"Checkpoint '{path}' does not exist ({path}.index is missing).")
    return path


class CheckpointInit(SessionInit):
    """Restore a ``tf.train.Checkpoint`` written by ``ModelSaver``.

    Args:
        path: a checkpoint prefix or a directory (its latest checkpoint).
        model_only: restore only the model's variables, not the optimizer or counters.
    """

    def __init__(self, path: str, model_only: bool = False):
        self.path = get_checkpoint_path(path)
        self.model_only = model_only

    def _init(self, target):
        ckpt = target.checkpoint
        if self.model_only:
            ckpt = tf.train.Checkpoint(model=target.checkpoint.model)
        try:
            status = ckpt.read(self.path)
        except (tf.errors.OpError, IndexError, OSError) as e:
            raise CheckpointLoadError(
                f"Checkpoint '{self.path}' is corrupt or not a TF2 checkpoint ({type(e).__name__}: "
                f"{str(e).splitlines()[0]}). Load an earlier checkpoint of the directory.") from e
        except ValueError as e:
            raise CheckpointLoadError(
                f"Checkpoint '{self.path}' does not fit the model: {e}. A variable has a different "
                "shape in the checkpoint; check the model definition.") from e
        try:
            status.assert_existing_objects_matched()
        except AssertionError as e:
            logger.warning("Some variables of the model are not in checkpoint '%s' and keep their "
                           "initial values: %s", self.path, str(e)[:2000])
        status.expect_partial()
        logger.info("Restored checkpoint %s", self.path)


SaverRestore = CheckpointInit


class DictRestore(SessionInit):
    """Assign arrays to variables by name (``'conv0/W'``); unknown names are warned about."""

    def __init__(self, variable_dict: Dict[str, np.ndarray], source: str = "dict"):
        self._dict = dict(variable_dict)
        self._source = source

    def _init(self, target):
        named = target.named_variables()
        unknown = sorted(set(self._dict) - set(named))
        missing = sorted(set(named) - set(self._dict))
        if unknown:
            logger.warning("%s: %d arrays match no variable of the model and are ignored: %s",
                           self._source, len(unknown), ", ".join(unknown[:20]))
        if missing:
            logger.warning("%s: %d variables of the model are not given and keep their values: %s",
                           self._source, len(missing), ", ".join(missing[:20]))
        for name in sorted(set(self._dict) & set(named)):
            var = named[name]
            val = np.asarray(self._dict[name])
            if tuple(val.shape) != tuple(var.shape):
                raise CheckpointLoadError(
                    f"{self._source}: variable '{name}' has shape {tuple(var.shape)} in the model but "
                    f"{tuple(val.shape)} in the file.")
            var.assign(val.astype(np.dtype(getattr(var.dtype, "as_numpy_dtype", var.dtype))))
        logger.info("Restored %d variables from %s", len(set(self._dict) & set(named)), self._source)


class NpzInit(DictRestore):
    """Load an ``.npz`` of named arrays (``np.savez(path, **{'conv0/W': w})``)."""

    def __init__(self, path: str):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Weight file '{path}' does not exist.")
        with np.load(path) as f:
            d = {k: f[k] for k in f.files}
        super().__init__(d, source=path)


class ChainInit(SessionInit):
    """Apply several initialisers in order."""

    def __init__(self, inits):
        self.inits = list(inits)

    def _init(self, target):
        for i in self.inits:
            i.init(target)


def SmartInit(obj, *, ignore_mismatch: bool = False) -> SessionInit:  # noqa: N802 (tensorpack's name)
    """Pick the right initialiser for ``obj``: None, a dict, an ``.npz``, a checkpoint or log dir,
    a SessionInit, or a list of those."""
    del ignore_mismatch
    if obj is None:
        return JustCurrentSession()
    if isinstance(obj, SessionInit):
        return obj
    if isinstance(obj, dict):
        return DictRestore(obj)
    if isinstance(obj, (list, tuple)):
        return ChainInit([SmartInit(x) for x in obj])
    if isinstance(obj, str):
        path = os.path.expanduser(obj)
        if path.endswith(".npz") or path.endswith(".npy"):
            return NpzInit(path)
        return CheckpointInit(path)
    raise TypeError(f"SmartInit cannot load from a {type(obj).__name__}")


def read_checkpoint_counter(path: str, name: str) -> Optional[int]:
    """The value of a scalar counter (``'global_step'``, ``'epoch'``) saved in a checkpoint."""
    try:
        return int(tf.train.load_variable(get_checkpoint_path(path), f"{name}/.ATTRIBUTES/VARIABLE_VALUE"))
    except (tf.errors.NotFoundError, ValueError, FileNotFoundError):
        return None
