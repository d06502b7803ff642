"""Loading weights into a model: checkpoints, ``.npz`` files of named arrays, dicts.

A *target* is anything with ``checkpoint`` (a ``tf.train.Checkpoint``) and
``named_variables()`` (``{'conv0/W': variable}``): a trainer or a predictor.

Example::

    SmartInit('train_log/mnist')             # the latest checkpoint of a log dir
    SmartInit('train_log/mnist/checkpoint-1200')
    SmartInit('pretrained.npz')              # arrays named like 'conv0/W'
    SmartInit({'fc/b': np.zeros(10)})

A checkpoint restores every variable of the model or refuses with one
:class:`CheckpointLoadError` listing every unmatched variable of the model and of the
checkpoint; names that differ only in Keras's auto-numbering (a Keras model built again
in the same process) are matched by structure. A partial load is always on purpose:
``SmartInit(path, ignore_mismatch=True)``, :class:`SaverRestoreRelaxed`, or a dict /
``.npz`` (the arrays given are loaded, the rest named in a warning).
"""
from __future__ import annotations

import os
from typing import Dict, Optional

import numpy as np
import tensorflow as tf

from ..utils import logger
from ..utils.npzfile import read_npz
from .checkpoint_files import get_checkpoint_path, latest_checkpoint, list_checkpoints
from .checkpoint_load import HYPERPARAMS_FROM, assign_by_name, assign_saved_value, warn_rounded
from .checkpoint_match import rename_by_structure
from .checkpoint_read import CheckpointLoadError, counter_of, is_named_format, load_chkpt_vars
from .checkpoint_write import nonfinite_names

__all__ = ["SessionInit", "JustCurrentSession", "CheckpointInit", "SaverRestore", "DictRestore",
           "NpzInit", "ChainInit", "SmartInit", "get_checkpoint_path", "CheckpointLoadError",
           "find_resumable_checkpoint", "SaverRestoreRelaxed", "get_model_loader"]


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


class CheckpointInit(SessionInit):
    """Restore a checkpoint written by ``ModelSaver``, matching variables by name.

    Names that differ only in Keras's auto-numbering (the same Keras model built again in
    one process: ``conv2d_4/kernel`` against the saved ``conv2d_3/kernel``) are matched by
    structure, optimizer slots following their variable; an info line says how many.
    Every missing, unexpected and shape-mismatched variable is reported in one
    message: a mismatched shape, or a variable of the model the checkpoint does not
    restore, is a :class:`CheckpointLoadError` (never a warning with weights left at their
    initial values); checkpoint variables the model lacks are a warning (an error with
    ``strict``). A damaged file is a ``CheckpointLoadError`` naming it. Checkpoints of the
    earlier creation-order format still load (through the target's ``tf.train.Checkpoint``),
    with a warning; TF1 name-based checkpoints (tensorpack's) load the model's variables by
    name, under the same rules.

    Args:
        path: a checkpoint prefix or a directory (its latest checkpoint).
        model_only: restore only the model's variables, not the optimizer or counters
            (always so for a target without an optimizer, e.g. a predictor).
        strict: missing or unexpected model variables are an error (auto-resume).
        hyperparams: where the code's optimizer and the checkpoint's differ in a hyper-parameter
            (the learning rate), ``'checkpoint'`` (the default: a resumed run continues where it
            stopped) or ``'code'`` wins; a warning names both values either way. An optimizer of
            another class (other slots) loads nothing of the saved one, with a warning.
        ignore_mismatch: a partial load on purpose: variables of another shape in the checkpoint,
            and variables of the model it does not have, keep their values, with one warning
            naming them (tensorpack's knob, here also for missing variables), instead of an error.

    Example::

        SaverRestore('train_log/mnist/checkpoint-1200', model_only=True)
    """

    def __init__(self, path: str, model_only: bool = False, strict: bool = False, hyperparams: str = "checkpoint",
                 ignore_mismatch: bool = False, _arrays: Optional[Dict[str, np.ndarray]] = None):
        if hyperparams not in HYPERPARAMS_FROM:
            raise ValueError(f"hyperparams must be one of {HYPERPARAMS_FROM}; got {hyperparams!r}")
        # a directory: its latest checkpoint, taken again if a running job rotates it away meanwhile
        self.directory = path if os.path.isdir(path) else None
        self.path = get_checkpoint_path(path)
        self.model_only = model_only
        self.strict = strict
        self.hyperparams = hyperparams
        self.ignore_mismatch = ignore_mismatch
        self._arrays = _arrays

    def _init(self, target):
        arrays, self._arrays = self._arrays, None  # (read ahead by auto-resume; freed once used)
        if arrays is None:
            arrays = self._read()
        model_only = self.model_only or getattr(target, "optimizer", None) is None
        if not is_named_format(arrays):
            if "_CHECKPOINTABLE_OBJECT_GRAPH" in arrays:
                self._init_creation_order(target, model_only)
                return
            # a TF1 name-based checkpoint (tensorpack's): its keys are variable names already
            logger.info("Checkpoint '%s' is a TF1 name-based checkpoint: loading the model's variables "
                        "by name.", self.path)
            model_only = True
        bad = nonfinite_names({k: v for k, v in arrays.items() if isinstance(v, np.ndarray)})
        if bad:
            logger.warning("Checkpoint '%s' holds NaN or Inf in: %s", self.path, ", ".join(bad))
        n = assign_by_name(target, arrays, self.path, model_only=model_only, strict=self.strict,
                           hyperparams=self.hyperparams, ignore_mismatch=self.ignore_mismatch)
        logger.info("Restored %d variables from checkpoint %s", n, self.path)

    def _read(self) -> Dict[str, np.ndarray]:
        """The checkpoint's arrays. One removed while it was read (a run that saves often and keeps
        few rotated it away) is replaced by the directory's newer latest, with a note; given by its
        own prefix, it is an error that says so."""
        for _ in range(5):
            try:
                return load_chkpt_vars(self.path)
            except CheckpointLoadError:
                if os.path.isfile(self.path + ".index"):
                    raise   # still there: damaged, not rotated
                newer = latest_checkpoint(self.directory) if self.directory else None
                if newer is None or newer == self.path:
                    raise CheckpointLoadError(
                        f"Checkpoint '{self.path}' was removed while it was read: the run that writes it keeps "
                        "only its newest checkpoints (ModelSaver(max_to_keep=...)). Load the log directory "
                        "instead to get its latest checkpoint, or keep more.") from None
                logger.info("Checkpoint %s was removed while it was read (the run writing %s rotated it); "
                            "loading the newer %s.", os.path.basename(self.path), self.directory,
                            os.path.basename(newer))
                self.path = newer
        return load_chkpt_vars(self.path)

    def _init_creation_order(self, target, model_only: bool):
        logger.warning(
            "Checkpoint '%s' is in the earlier creation-order format: its variables are matched by the "
            "order the model creates them, not by name. To convert it, load it into the model that wrote "
            "it and save again (a ModelSaver writes checkpoints by name).", self.path)
        ckpt = target.checkpoint
        if model_only:
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


class SaverRestoreRelaxed(CheckpointInit):
    """:class:`SaverRestore` with tensorpack's relaxed matching: a saved array of another shape
    but the same number of elements is reshaped into its variable; one that cannot be reshaped
    leaves its variable as it is, with a warning naming it (instead of an error).

    Args:
        model_path: a checkpoint prefix or a directory (its latest checkpoint).
        prefix: load the variable named ``<prefix>/<name>`` from the checkpoint's ``<name>``.
        ignore: variable names (``'fc/b'`` or ``'fc/b:0'``) to leave out.

    Example::

        SaverRestoreRelaxed('pretrained/checkpoint-100', ignore=['linear/W', 'linear/b'])
    """

    def __init__(self, model_path: str, prefix: Optional[str] = None, ignore=()):
        super().__init__(model_path, ignore_mismatch=True)
        self.prefix = prefix
        self.ignore = {n[:-2] if n.endswith(":0") else n for n in ignore}

    def _init(self, target):
        arrays = self._read()
        if is_named_format(arrays):
            if self.prefix:
                arrays = {f"{self.prefix}/{k}": v for k, v in arrays.items()}
            arrays = {k: v for k, v in arrays.items() if k not in self.ignore}
            for name, var in target.named_variables().items():
                val = arrays.get(name)
                if (isinstance(val, np.ndarray) and tuple(val.shape) != tuple(var.shape)
                        and val.size == int(np.prod(var.shape))):
                    logger.info("SaverRestoreRelaxed: %s %s reshaped to %s", name, val.shape, tuple(var.shape))
                    arrays[name] = val.reshape(tuple(var.shape))
        self._arrays = arrays
        super()._init(target)


def get_model_loader(filename: str) -> SessionInit:
    """tensorpack's older name of :func:`SmartInit` for one file (``.npz`` or a checkpoint).

    Example::

        config = PredictConfig(..., session_init=get_model_loader('train_log/x/checkpoint'))
    """
    return SmartInit(filename)


class DictRestore(SessionInit):
    """Assign arrays to variables by name (``'conv0/W'``); a partial load on purpose: unknown
    names and variables not given are warned about. Names that differ only in Keras's
    auto-numbering are matched by structure, as for checkpoints.

    Example::

        DictRestore({'fc/W': w, 'fc/b': b}).init(trainer)
    """

    def __init__(self, variable_dict: Dict[str, np.ndarray], source: str = "dict"):
        self._dict = dict(variable_dict)
        self._source = source

    def _init(self, target):
        named = target.named_variables()
        given = {k: np.asarray(v) for k, v in self._dict.items()}
        given, shadowed = rename_by_structure(named, given, self._source)
        unknown = sorted(set(given) - set(named)) + shadowed
        missing = sorted(set(named) - set(given))
        if unknown:
            logger.warning("%s: %d arrays match no variable of the model and are ignored: %s",
                           self._source, len(unknown), ", ".join(unknown[:20]))
        if missing:
            logger.warning("%s: %d variables of the model are not given and keep their values: %s",
                           self._source, len(missing), ", ".join(missing[:20]))
        rounded = []
        for name in sorted(set(given) & set(named)):
            var = named[name]
            val = given[name]
            if tuple(val.shape) != tuple(var.shape):
                raise CheckpointLoadError(
                    f"{self._source}: variable '{name}' has shape {tuple(var.shape)} in the model but "
                    f"{tuple(val.shape)} in the file.")
            assign_saved_value(var, val, name, self._source, rounded)
        warn_rounded(self._source, rounded)
        logger.info("Restored %d variables from %s", len(set(given) & set(named)), self._source)


class NpzInit(DictRestore):
    """Load an ``.npz`` of named arrays (``np.savez(path, **{'conv0/W': w})``)."""

    def __init__(self, path: str):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Weight file '{path}' does not exist.")
        super().__init__(read_npz(path, "SmartInit"), source=path)   # a damaged file: an error naming it


class ChainInit(SessionInit):
    """Apply several initialisers in order."""

    def __init__(self, inits):
        self.inits = list(inits)

    def _init(self, target):
        for i in self.inits:
            i.init(target)


def SmartInit(obj, *, ignore_mismatch: bool = False, hyperparams: str = "checkpoint") -> SessionInit:  # noqa: N802
    """Pick the right initialiser for ``obj``: None, a dict, an ``.npz``, a checkpoint or log dir,
    a SessionInit, or a list of those. ``ignore_mismatch`` and ``hyperparams`` apply to
    checkpoints (see :class:`CheckpointInit`): ``ignore_mismatch=True`` makes a checkpoint's
    load partial on purpose. (tensorpack's name.)

    Example::

        SmartInit('train_log/run')                          # every variable, or an error
        SmartInit('')                                       # nothing (as None)
        SmartInit('pretrained/checkpoint-100', ignore_mismatch=True)   # what matches; a warning
    """
    # tensorpack's `if not obj`: '' (FasterRCNN's default BACKBONE.WEIGHTS), None, [] load nothing
    if obj is None or (isinstance(obj, (str, list, tuple, dict)) and not obj):
        return JustCurrentSession()
    if isinstance(obj, SessionInit):
        return obj
    if isinstance(obj, dict):
        return DictRestore(obj)
    if isinstance(obj, (list, tuple)):
        return ChainInit([SmartInit(x, ignore_mismatch=ignore_mismatch, hyperparams=hyperparams) for x in obj])
    if isinstance(obj, str):
        path = os.path.expanduser(obj)
        if path.endswith(".npz") or path.endswith(".npy"):
            return NpzInit(path)
        return CheckpointInit(path, hyperparams=hyperparams, ignore_mismatch=ignore_mismatch)
    raise TypeError(f"SmartInit cannot load from a {type(obj).__name__}")


def read_checkpoint_counter(path: str, name: str) -> Optional[int]:
    """The value of a scalar counter (``'global_step'``, ``'epoch'``) saved in a checkpoint."""
    try:
        prefix = get_checkpoint_path(path)
        for key in (name, f"{name}/.ATTRIBUTES/VARIABLE_VALUE"):
            try:
                return int(tf.train.load_variable(prefix, key))
            except (tf.errors.NotFoundError, ValueError):
                continue
    except (tf.errors.OpError, ValueError, FileNotFoundError):
        pass
    return None


def find_resumable_checkpoint(directory: str, hyperparams: str = "checkpoint") -> Optional[CheckpointInit]:
    """The newest checkpoint of ``directory`` that reads back whole and holds only finite values.

    Damaged or non-finite checkpoints are skipped, each named in a warning, and the
    one used instead is said. The returned :class:`CheckpointInit` is ``strict``
    (a resumed run must be the same model) and holds the values already read.
    Returns None when the directory has no checkpoint; raises
    :class:`CheckpointLoadError` when it has some but none is usable.

    Example::

        init = find_resumable_checkpoint('train_log/mnist')
    """
    candidates = list_checkpoints(directory)
    rejected = []
    for prefix in candidates:
        try:
            arrays = load_chkpt_vars(prefix)
        except CheckpointLoadError as e:
            logger.warning("Auto-resume: skipping %s: %s", os.path.basename(prefix), e)
            rejected.append(prefix)
            continue
        bad = nonfinite_names(arrays)
        if bad:
            logger.warning("Auto-resume: skipping %s: it holds NaN or Inf (%s).", os.path.basename(prefix),
                           ", ".join(bad[:10]) + (" ..." if len(bad) > 10 else ""))
            rejected.append(prefix)
            continue
        if rejected:
            logger.warning("Auto-resume: using %s instead of %s.", os.path.basename(prefix),
                           ", ".join(os.path.basename(p) for p in rejected))
        init = CheckpointInit(prefix, strict=True, hyperparams=hyperparams, _arrays=arrays)
        init.global_step = counter_of(arrays, "global_step")
        init.epoch = counter_of(arrays, "epoch")
        return init
    if rejected:
        raise CheckpointLoadError(
            f"Auto-resume: no usable checkpoint in {directory}: every one is damaged or holds NaN/Inf "
            f"({', '.join(os.path.basename(p) for p in rejected)}). Start in a new log directory, or "
            "remove those files.")
    return None
