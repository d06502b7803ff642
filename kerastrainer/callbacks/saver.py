"""Checkpoints: ``ModelSaver`` writes them atomically; ``MinSaver``/``MaxSaver`` keep the best.

Layout of a checkpoint directory (the log directory by default)::

    checkpoint                         # the pointer: TF's CheckpointState text format
    checkpoint-1000.index              # one checkpoint: tf.train.Checkpoint files
    checkpoint-1000.data-00000-of-00001
    checkpoint-2000.index ...
    min-validation_error.index ...     # MinSaver's copy of the best one
    min-validation_error.json          # ... and the value that made it the best

A save writes into a temporary directory, moves the files in place (the index
last), checks that the new checkpoint reads back, and only then replaces the
pointer file (temp file, fsync, ``os.replace``). A crash at any point leaves the
pointer on a complete checkpoint. ``tf.train.latest_checkpoint(dir)`` understands
the pointer too; :func:`latest_checkpoint` also recovers when the pointer is missing.

Variables are saved under their scoped names (``conv0/W``; see
:mod:`kerastrainer.tfutils.checkpoint_write`), so ``tf.train.list_variables(path)`` lists
them and loading matches names. Weights holding NaN or Inf are never saved: the
previous checkpoint stays the latest.

Example::

    callbacks = [ModelSaver(max_to_keep=5), MinSaver('validation_error')]
    ...
    SmartInit(latest_checkpoint('train_log/mnist')).init(trainer)
    tf.train.list_variables(latest_checkpoint('train_log/mnist'))   # [('conv0/W', [3, 3, 1, 32]), ...]
"""
from __future__ import annotations

import errno
import glob
import json
import math
import numbers
import os
import re
import shutil
import tempfile
import time
import uuid
from typing import List, Optional, Tuple

from ..tfutils.checkpoint_files import (CHECKPOINT_PREFIX, POINTER_FILE as _POINTER, checkpoint_exists as _exists,
                                       latest_checkpoint, read_pointer as _read_pointer)
from ..tfutils.checkpoint_write import (FORMAT_KEY, NONFINITE_WEIGHTS_HINT, CheckpointWriteError,
                                        NonFiniteWeightsError, nonfinite_names, write_checkpoint)
from ..utils import logger
from ..utils.casting import whole_number
from .base import Callback
from .fileio import atomic_write_text, remove_stale_temporaries

__all__ = ["ModelSaver", "MinSaver", "MaxSaver", "latest_checkpoint", "CHECKPOINT_PREFIX"]

_TMP_DIR_PREFIX = ".tmp-save-"


# --- the pointer file ---------------------------------------------------------------------------
def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _write_pointer(directory: str, latest: str, kept: List[Tuple[str, float]],
                   last_preserved: float) -> None:
    """Atomically write TF's CheckpointState (text format) with paths relative to ``directory``."""
    lines = [f"model_checkpoint_path: {_quote(latest)}"]
    lines += [f"all_model_checkpoint_paths: {_quote(name)}" for name, _ in kept]
    lines += [f"all_model_checkpoint_timestamps: {ts!r}" for _, ts in kept]
    lines.append(f"last_preserved_timestamp: {last_preserved!r}")
    atomic_write_text(os.path.join(directory, _POINTER), "\n".join(lines) + "\n")


def _verify(prefix: str) -> None:
    """Raise if the checkpoint at ``prefix`` cannot be read back."""
    import tensorflow as tf
    reader = tf.train.load_checkpoint(prefix)
    names = reader.get_variable_to_shape_map()
    for key in (FORMAT_KEY, "_CHECKPOINTABLE_OBJECT_GRAPH"):
        if key in names:
            reader.get_tensor(key)  # reads from the data file


def _remove_prefix(prefix: str) -> None:
    for f in glob.glob(glob.escape(prefix) + ".*"):
        try:
            os.remove(f)
        except OSError as e:
            logger.warn("Could not remove old checkpoint file %s: %s", f, e)


_CAUSES = {   # errno -> (the cause in words, what to do); the message of an error names them
    errno.EROFS: ("it is on a read-only file system", "Remount it read-write"),
    errno.EACCES: ("this user may not write there (permissions)", "Give this user write permission there"),
    errno.EPERM: ("this user may not write there (permissions)", "Give this user write permission there"),
    errno.ENOSPC: ("the disk is full", "Free space there"),
    errno.EDQUOT: ("the disk quota is used up", "Free space in the quota"),
}
_CAUSE_TEXT = {"Read-only file system": errno.EROFS, "Permission denied": errno.EACCES,
               "No space left on device": errno.ENOSPC, "Disk quota exceeded": errno.EDQUOT}


def _errno_of(err: BaseException) -> Optional[int]:
    """The errno behind a failed write: an OSError's own, or the one a TF error's message names."""
    if isinstance(err, OSError) and err.errno:
        return err.errno
    text = getattr(err, "message", None) or str(err)
    return next((code for words, code in _CAUSE_TEXT.items() if words in text), None)


def check_writable_directory(directory: str, who: str) -> None:
    """Create ``directory`` and write a probe file in it, so that a directory that cannot take
    checkpoints is found when training starts, not at the first save an epoch later.

    Raises :class:`CheckpointWriteError` naming the directory, the cause (read-only file
    system, permissions, disk full, quota) and what to do.
    """
    try:
        os.makedirs(directory, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".tmp-probe-", dir=directory)
        try:
            os.write(fd, b"kerastrainer")
            os.fsync(fd)   # where space is only claimed at flush time
        finally:
            os.close(fd)
            os.remove(probe)
    except OSError as e:
        cause, todo = _CAUSES.get(e.errno, (e.strerror or str(e), "Fix that"))
        err = CheckpointWriteError(
            f"{who}: cannot write checkpoints in {directory}: {cause} ({e.strerror or e}). {todo}, or give "
            "ModelSaver(checkpoint_dir=...) (or logger.set_logger_dir) a writable directory; nothing was trained.")
        err.errno = e.errno
        raise err from e


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.1f} MiB" if nbytes >= 2**20 else f"{max(1, nbytes // 1024)} KiB"


def _publish_files(tmp_prefix: str, final_prefix: str) -> None:
    """Move ``tmp_prefix.*`` to ``final_prefix.*``: data files first, the index last."""
    files = glob.glob(glob.escape(tmp_prefix) + ".*")
    if not any(f.endswith(".index") for f in files):
        raise RuntimeError(f"Checkpoint write produced no index file under {tmp_prefix}.")
    files.sort(key=lambda f: f.endswith(".index"))
    for f in files:
        os.replace(f, final_prefix + f[len(tmp_prefix):])


class ModelSaver(Callback):
    """Save ``trainer.checkpoint`` at each epoch end (or when triggered), atomically.

    Checkpoints go to ``<checkpoint_dir>/checkpoint-<global_step>``; see the module
    docstring for the layout and why a crash never leaves a broken latest checkpoint.
    Before each save the trainer's counters are copied into the checkpoint:
    ``trainer.sync_counters()`` (the checkpoint's ``global_step``, and ``epoch``: the number
    of *completed* epochs).
    At the end of training it saves once more unless the last step is saved already
    or the last call's cost was not finite.

    Args:
        max_to_keep: the newest checkpoints to keep; older ones are deleted.
        keep_checkpoint_every_n_hours: also keep one checkpoint per this many hours
            (None: never keep more than ``max_to_keep``).
        checkpoint_dir: the directory; the log directory by default.

    In multi-worker training (``MultiWorkerMirroredStrategy``) every worker must take
    part in writing a checkpoint, so non-chief workers write to a temporary
    directory that is deleted right away (TF's rule); with other strategies only the
    chief writes.

    Example::

        PeriodicTrigger(ModelSaver(max_to_keep=3), every_k_steps=1000)
    """

    _chief_only = False  # see the multi-worker note; non-chiefs write nothing that stays

    def __init__(self, max_to_keep: int = 10, keep_checkpoint_every_n_hours: Optional[float] = 0.5,
                 checkpoint_dir: Optional[str] = None):
        # a whole number >= 1: int(2.7) would keep 2 checkpoints without saying so
        max_to_keep = whole_number(max_to_keep, "ModelSaver(max_to_keep=...)", minimum=1)
        hours = keep_checkpoint_every_n_hours
        if hours is not None and (isinstance(hours, bool) or not isinstance(hours, numbers.Real)
                                  or not math.isfinite(hours) or hours <= 0):
            # NaN would compare False everywhere and silently never keep one; True would mean 1 hour
            raise ValueError("ModelSaver: keep_checkpoint_every_n_hours must be a positive number of hours "
                             f"or None, got {hours!r}.")
        self.max_to_keep = max_to_keep
        self.keep_every_secs = None if keep_checkpoint_every_n_hours is None \
            else keep_checkpoint_every_n_hours * 3600.0
        self._dir_arg = checkpoint_dir
        self.checkpoint_dir: Optional[str] = None
        self._kept: List[Tuple[str, float]] = []   # (relative prefix, timestamp), oldest first
        self._last_preserved = 0.0
        self._last_saved_step: Optional[int] = None
        self._failed_step: Optional[int] = None
        self._start_step: Optional[int] = None

    # --- set-up ---------------------------------------------------------------------------------
    def _setup_graph(self):
        if self.trainer.checkpoint is None:
            raise ValueError("ModelSaver: the trainer has no `checkpoint` (a tf.train.Checkpoint) to save.")
        if not self._is_writer():
            return  # non-chief workers keep nothing (and often have no log directory)
        d = self._dir_arg or logger.get_logger_dir()
        if d is None:
            raise ValueError("ModelSaver needs a directory: call logger.set_logger_dir(...) first, "
                             "or pass ModelSaver(checkpoint_dir=...).")
        self.checkpoint_dir = os.path.abspath(d)
        check_writable_directory(self.checkpoint_dir, "ModelSaver")

    def _is_writer(self) -> bool:
        return bool(self.trainer.is_chief)

    def _before_train(self):
        self._start_step = int(self.global_step)
        self._last_saved_step = self._failed_step = None
        if not self._is_writer():
            return
        for stale in glob.glob(os.path.join(glob.escape(self.checkpoint_dir), _TMP_DIR_PREFIX + "*")):
            shutil.rmtree(stale, ignore_errors=True)  # left by a crash mid-save
        remove_stale_temporaries(os.path.join(self.checkpoint_dir, _POINTER))
        self._kept, self._last_preserved = [], time.time()
        state = _read_pointer(self.checkpoint_dir)
        if state is not None:
            times = list(state.all_model_checkpoint_timestamps)
            for i, p in enumerate(state.all_model_checkpoint_paths):
                rel = os.path.relpath(p, self.checkpoint_dir) if os.path.isabs(p) else p
                if _exists(os.path.join(self.checkpoint_dir, rel)):
                    self._kept.append((rel, times[i] if i < len(times) else time.time()))
            if state.last_preserved_timestamp:
                self._last_preserved = state.last_preserved_timestamp

    # --- saving ---------------------------------------------------------------------------------
    def _sync_counters(self) -> None:
        self.trainer.sync_counters()

    def _write(self, prefix: str) -> None:
        """Write the checkpoint files at ``prefix`` (a separate method so tests can break it).

        Variables are saved by name (:mod:`~kerastrainer.tfutils.checkpoint_write`) when the
        trainer names them; a trainer that only has a ``tf.train.Checkpoint`` gets it
        written as it is. Non-finite weights raise ``NonFiniteWeightsError``.
        """
        tr = self.trainer
        if callable(getattr(tr, "named_variables", None)):
            write_checkpoint(tr, prefix)
            return
        variables = {v.name: v for v in tr.checkpoint.model.trainable_variables} \
            if hasattr(getattr(tr.checkpoint, "model", None), "trainable_variables") else {}
        bad = nonfinite_names(variables)
        if bad:
            raise NonFiniteWeightsError(f"{len(bad)} variable(s) hold NaN or Inf: {', '.join(bad)}. The "
                                        "model diverged; nothing was saved. " + NONFINITE_WEIGHTS_HINT)
        tr.checkpoint.write(prefix)

    def _save_as_non_chief(self) -> None:
        import tensorflow as tf
        strategy = self.trainer.strategy
        if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
            return
        tmp = tempfile.mkdtemp(prefix="kerastrainer-worker-ckpt-")
        try:
            self._write(os.path.join(tmp, "ckpt"))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def save(self) -> Optional[str]:
        """Save now; returns the new checkpoint's path prefix (None on a non-chief worker).

        Raises ``NonFiniteWeightsError`` and keeps the previous latest checkpoint when
        the last train call's cost or any weight is NaN or Inf.
        """
        self._sync_counters()
        gs = int(self.global_step)
        if not _last_call_finite(self.trainer):
            bad = int(self.trainer.last_step_outputs.get("_nonfinite_step", -1))
            raise NonFiniteWeightsError(
                f"ModelSaver: not saving at global step {gs}: the cost was NaN or Inf"
                + (f" at step {bad}" if bad >= 0 else "") + "; the latest checkpoint stays "
                f"{latest_checkpoint(self.checkpoint_dir) if self.checkpoint_dir else None}.")
        if not self._is_writer():
            self._save_as_non_chief()
            self._last_saved_step = gs  # the same decisions as the chief at after_train
            return None
        import tensorflow as tf
        name = f"{CHECKPOINT_PREFIX}-{gs}"
        final = os.path.join(self.checkpoint_dir, name)
        t0 = time.perf_counter()
        try:
            tmpdir = tempfile.mkdtemp(prefix=_TMP_DIR_PREFIX + f"{gs}-", dir=self.checkpoint_dir)
            try:
                tmp_prefix = os.path.join(tmpdir, "ckpt")
                try:
                    self._write(tmp_prefix)
                except NonFiniteWeightsError as e:
                    raise NonFiniteWeightsError(f"ModelSaver: not saving at global step {gs}: {e} The latest "
                                                f"checkpoint stays {latest_checkpoint(self.checkpoint_dir)}.") \
                        from None
                _publish_files(tmp_prefix, final)
            finally:
                shutil.rmtree(tmpdir, ignore_errors=True)
            _verify(final)
            self._record(name)
        except (OSError, tf.errors.OpError) as e:   # the file system's or TF's checkpoint I/O
            if all(n != name for n, _ in self._kept):
                _remove_prefix(final)   # not pointed to: its files only take space
            self._failed_step = gs
            raise CheckpointWriteError(self._write_failure_message(name, e)) from e
        self._last_saved_step = gs
        logger.info("Model saved to %s (%.2f s).", final, time.perf_counter() - t0)
        return final

    def _write_failure_message(self, name: str, err: BaseException) -> str:
        reason = getattr(err, "message", None) or getattr(err, "strerror", None) or str(err)
        # TF puts the temporary file's path first and the op's name last
        reason = re.sub(r"\s*\[Op:\w+\]\s*$", "", reason.rsplit(";", 1)[-1].strip())
        latest = latest_checkpoint(self.checkpoint_dir)
        code = _errno_of(err)
        room = ""
        if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, None):   # the room there is the point
            try:
                free = shutil.disk_usage(self.checkpoint_dir).free
                size = sum(os.path.getsize(f) for f in glob.glob(glob.escape(latest) + ".*")) if latest else 0
                room = f" ({_mib(free)} free there" + (f"; a checkpoint takes {_mib(size)}" if size else "") + ")"
            except OSError:
                pass
        cause, todo = _CAUSES.get(code, ("", "Free space there"))
        kept = (f"The latest checkpoint stays {latest}: nothing up to it is lost; AutoResumeTrainConfig "
                "resumes from it." if latest else "There is no earlier checkpoint.")
        return (f"ModelSaver: could not write {name} in {self.checkpoint_dir}: {reason}{room}"
                + (f": {cause}" if cause and code not in (errno.ENOSPC,) else "") + f". {kept} {todo}, or give "
                "ModelSaver(checkpoint_dir=...) a directory that can take it, then run again.")

    def _record(self, name: str) -> None:
        """Point to the new checkpoint, then delete those past ``max_to_keep``."""
        now = time.time()
        kept = [(n, t) for n, t in self._kept if n != name] + [(name, now)]
        dropped = []
        while len(kept) > self.max_to_keep:
            n, t = kept.pop(0)
            if self.keep_every_secs is not None and t - self._last_preserved >= self.keep_every_secs:
                self._last_preserved = t  # preserved: forgotten by the pointer, kept on disk
                logger.info("Keeping %s for good (keep_checkpoint_every_n_hours).", n)
            else:
                dropped.append(n)
        _write_pointer(self.checkpoint_dir, name, kept, self._last_preserved)
        self._kept = kept
        for n in dropped:
            _remove_prefix(os.path.join(self.checkpoint_dir, n))

    def _trigger(self):
        self.save()

    def _after_train(self):
        gs = int(self.global_step)
        if self._last_saved_step == gs or self._start_step == gs or self._failed_step == gs:
            return   # saved already, nothing new, or this very save failed and its error is on its way
        if not _last_call_finite(self.trainer):
            logger.warn("ModelSaver: not saving at the end of training: the last train call's cost "
                        "was not finite.")
            return
        try:
            self.save()
        except NonFiniteWeightsError as e:
            logger.error("%s", e)

    @property
    def kept_checkpoints(self) -> List[str]:
        """Path prefixes of the checkpoints listed by the pointer, oldest first."""
        return [os.path.join(self.checkpoint_dir, n) for n, _ in self._kept]


def _last_call_finite(trainer) -> bool:
    import math
    outputs = trainer.last_step_outputs
    if int(outputs.get("_nonfinite_step", -1)) >= 0:
        return False
    cost = trainer.step_loss()[1]
    return cost is None or math.isfinite(float(cost))


def _safe_filename(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]+", "_", s)


class MinSaver(Callback):
    """Keep a copy of the checkpoint with the lowest (``reverse=True``: highest) statistic.

    At each trigger (epoch end by default) it reads ``trainer.monitors.get_latest(stat)``;
    when it improves on the best so far, the latest checkpoint (written by a
    :class:`ModelSaver` listed *before* this callback) is copied to
    ``min-<stat>`` (``max-<stat>``), and the value to ``min-<stat>.json`` so that a
    resumed run keeps comparing against it.

    Args:
        monitor_stat: the statistic's name, e.g. ``'validation_error'``.
        reverse: keep the maximum instead.
        filename: the copy's name; ``min-<stat>``/``max-<stat>`` by default.
        checkpoint_dir: where ModelSaver writes; the log directory by default.

    Example::

        callbacks = [ModelSaver(), InferenceRunner(val, ClassificationError()),
                     MinSaver('validation_error')]
    """

    def __init__(self, monitor_stat: str, reverse: bool = False, filename: Optional[str] = None,
                 checkpoint_dir: Optional[str] = None):
        if not isinstance(monitor_stat, str) or not monitor_stat:
            raise TypeError(f"{type(self).__name__}: monitor_stat must be a statistic's name, got {monitor_stat!r}.")
        self.monitor_stat = monitor_stat
        self.reverse = bool(reverse)
        self.filename = filename or (("max-" if self.reverse else "min-") + _safe_filename(monitor_stat))
        self._dir_arg = checkpoint_dir
        self.checkpoint_dir: Optional[str] = None
        self.best: Optional[float] = None
        self._warned = False

    def _setup_graph(self):
        d = self._dir_arg or logger.get_logger_dir()
        if d is None:
            raise ValueError(f"{type(self).__name__} needs a directory: call logger.set_logger_dir(...) "
                             "first, or pass checkpoint_dir=...")
        self.checkpoint_dir = os.path.abspath(d)

    def _sidecar(self) -> str:
        return os.path.join(self.checkpoint_dir, self.filename + ".json")

    def _before_train(self):
        path = self._sidecar()
        if os.path.isfile(path):
            try:
                with open(path, encoding="utf-8") as f:
                    record = json.load(f)
                if record.get("stat", self.monitor_stat) != self.monitor_stat:
                    logger.warn("%s: %s holds the best of '%s', not of '%s'; starting afresh (give each "
                                "MinSaver/MaxSaver its own filename).", type(self).__name__, path,
                                record.get("stat"), self.monitor_stat)
                    return
                self.best = float(record["value"])
                logger.info("%s: best %s so far is %.5g (from %s).", type(self).__name__,
                            self.monitor_stat, self.best, path)
            except (ValueError, KeyError, TypeError, OSError) as e:
                logger.warn("%s: ignoring unreadable %s (%s).", type(self).__name__, path, e)

    def _better(self, v: float) -> bool:
        if v != v:  # NaN
            return False
        if self.best is None:
            return True
        return v > self.best if self.reverse else v < self.best

    def _trigger(self):
        try:
            v = float(self.trainer.monitors.get_latest(self.monitor_stat))
        except KeyError as e:
            if not self._warned:
                self._warned = True
                logger.warn("%s: %s", type(self).__name__, e.args[0] if e.args else e)
            return
        if not self._better(v):
            return
        src = latest_checkpoint(self.checkpoint_dir)
        if src is None:
            raise RuntimeError(f"{type(self).__name__}: no checkpoint in {self.checkpoint_dir} to copy. "
                               "Put a ModelSaver before it in the callbacks.")
        m = re.search(r"-(\d+)$", src)
        if m and int(m.group(1)) != int(self.global_step):
            logger.warn("%s: the latest checkpoint (%s) is not from the current step %d; put ModelSaver "
                        "before %s and trigger them together.", type(self).__name__, src,
                        self.global_step, type(self).__name__)
        self._copy(src, os.path.join(self.checkpoint_dir, self.filename))
        self.best = v
        atomic_write_text(self._sidecar(), json.dumps(
            {"stat": self.monitor_stat, "value": v, "global_step": int(self.global_step),
             "source": os.path.basename(src)}))
        logger.info("Model at global step %d with %s %s=%.5g saved as %s.", self.global_step,
                    "max" if self.reverse else "min", self.monitor_stat, v, self.filename)

    @staticmethod
    def _copy(src: str, dst: str) -> None:
        """Copy the checkpoint files of ``src`` to ``dst``: temp names first, the index last."""
        files = glob.glob(glob.escape(src) + ".*")
        files.sort(key=lambda f: f.endswith(".index"))
        tag = uuid.uuid4().hex[:8]
        staged = []
        try:
            for f in files:
                tmp = f"{dst}.tmp-{tag}{f[len(src):]}"
                shutil.copyfile(f, tmp)
                staged.append((tmp, dst + f[len(src):]))
            for tmp, final in staged:
                os.replace(tmp, final)
        except BaseException:
            for tmp, _ in staged:
                if os.path.exists(tmp):
                    os.remove(tmp)
            raise


class MaxSaver(MinSaver):
    """:class:`MinSaver` that keeps the checkpoint with the highest statistic (``max-<stat>``).

    Example::

        MaxSaver('validation_accuracy')
    """

    def __init__(self, monitor_stat: str, filename: Optional[str] = None,
                 checkpoint_dir: Optional[str] = None):
        super().__init__(monitor_stat, reverse=True, filename=filename, checkpoint_dir=checkpoint_dir)
