"""The project logger, and the training log directory.

``set_logger_dir(dir, action)`` follows tensorpack: when ``dir`` already exists,
``action`` says what to do with it:

- ``'k'`` keep it (append to the log; use with auto-resume),
- ``'d'`` delete it,
- ``'b'`` back it up to ``dir + timestamp`` and start afresh,
- ``'n'`` use a new directory ``dir + timestamp``,
- ``'q'`` quit with an error.

The process holds the directory's lock (``.lock``) until another directory is set or
the process ends: a second training run in the same directory stops at once with
:class:`~kerastrainer.utils.dirlock.LogDirLockedError` naming the holder. In a multi-process
job (``kerastrainer-run``, ``horovodrun``, ``mpirun``, ``srun``, ``TF_CONFIG``) only the chief
(rank 0) takes ``dir``; any other rank gets a private temporary directory and a warning.

Without an action it asks on a terminal; when stdin is not a terminal it never
prompts and raises instead, naming the choices.

The level is INFO unless the environment sets ``KERASTRAINER_LOG_LEVEL`` (``DEBUG``,
``WARNING``, ``ERROR`` or a number) or the program calls ``logger.setLevel``.

Example::

    from kerastrainer.utils import logger
    logger.set_logger_dir('train_log/mnist', action='k')
    logger.info("written to %s", logger.get_logger_dir())
"""
from __future__ import annotations

import errno
import logging
import os
import shutil
import sys
from datetime import datetime
from typing import Optional

from ._cluster_env import get_cluster_info, is_private_log_dir, private_log_dir
from .dirlock import LogDirLock

__all__ = ["set_logger_dir", "auto_set_dir", "get_logger_dir", "info", "warn", "warning",
           "error", "exception", "debug", "critical", "setLevel", "addFilter"]


class _Formatter(logging.Formatter):
    def format(self, record):
        date = "[%(asctime)s @%(filename)s:%(lineno)d]"
        if record.levelno == logging.WARNING:
            fmt = date + " WRN %(message)s"
        elif record.levelno in (logging.ERROR, logging.CRITICAL):
            fmt = date + " ERR %(message)s"
        elif record.levelno == logging.DEBUG:
            fmt = date + " DBG %(message)s"
        else:
            fmt = date + " %(message)s"
        self._style._fmt = fmt
        return super().format(record)


LEVEL_ENV = "KERASTRAINER_LOG_LEVEL"


def _level_from_env() -> int:
    """``KERASTRAINER_LOG_LEVEL``: DEBUG, INFO (the default), WARNING, ERROR, or a number."""
    value = os.environ.get(LEVEL_ENV, "").strip()
    if not value:
        return logging.INFO
    if value.isdigit():
        return int(value)
    level = logging.getLevelName(value.upper())
    if isinstance(level, int):
        return level
    sys.stderr.write(f"kerastrainer: {LEVEL_ENV}={value!r} is not a log level (DEBUG, INFO, WARNING, "
                     "ERROR); using INFO.\n")
    return logging.INFO


def _make_logger() -> logging.Logger:
    lg = logging.getLogger("kerastrainer")
    lg.propagate = False
    lg.setLevel(_level_from_env())
    if not lg.handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(_Formatter(datefmt="%m%d %H:%M:%S"))
        lg.addHandler(handler)
    return lg


_logger = _make_logger()
info = _logger.info
warning = _logger.warning
warn = _logger.warning
error = _logger.error
exception = _logger.exception
debug = _logger.debug
critical = _logger.critical
setLevel = _logger.setLevel
addFilter = _logger.addFilter

LOG_DIR: Optional[str] = None
_FILE_HANDLER: Optional[logging.Handler] = None
_DIR_LOCK = None  # the LogDirLock of LOG_DIR, held while this process uses it


def _timestamp() -> str:
    return datetime.now().strftime("%m%d-%H%M%S")


def _set_file(path: str) -> None:
    global _FILE_HANDLER
    if _FILE_HANDLER is not None:
        _logger.removeHandler(_FILE_HANDLER)
        _FILE_HANDLER.close()
    if os.path.isfile(path):
        # keep older logs of the same directory (action 'k')
        backup = path + "." + _timestamp()
        shutil.move(path, backup)
        info("Existing log file '%s' backed up to '%s'", path, backup)
    handler = logging.FileHandler(filename=path, encoding="utf-8", mode="w")
    handler.setFormatter(_Formatter(datefmt="%m%d %H:%M:%S"))
    _FILE_HANDLER = handler
    _logger.addHandler(handler)
    info("Argv: %s", " ".join(sys.argv))


def set_logger_dir(dirname: str, action: Optional[str] = None) -> None:
    """Set the directory for logs, checkpoints and monitors' output.

    Args:
        dirname: the directory; created when missing.
        action: one of 'k', 'd', 'b', 'n', 'q' (see the module docstring), used only
            when ``dirname`` exists and is not empty.
    """
    global LOG_DIR
    dirname = _worker_log_dir(os.path.normpath(dirname))
    # before deleting, moving or appending to it: is another run using it?
    if _DIR_LOCK is None or os.path.abspath(_DIR_LOCK.dirname) != os.path.abspath(dirname):
        LogDirLock(dirname).check_free()
    if _FILE_HANDLER is not None:
        _logger.removeHandler(_FILE_HANDLER)

    def dir_nonempty(d):
        return os.path.isdir(d) and len([x for x in os.listdir(d) if x[0] != "."])

    if dir_nonempty(dirname):
        if not action:
            if not (sys.stdin is not None and sys.stdin.isatty()):
                raise RuntimeError(
                    f"Log directory '{dirname}' exists and is not empty, and stdin is not a terminal "
                    "to ask what to do. Pass action='k' (keep), 'd' (delete), 'b' (backup), "
                    "'n' (new directory) or 'q' (quit).")
            warn("Log directory %s exists! Use 'd' to delete it.", dirname)
            warn("If you're resuming from a previous run, you can choose to keep it. "
                 "Press any other key to exit.")
            while not action:
                action = input("Select Action: k (keep) / d (delete) / b (backup) / n (new) / q (quit):"
                               ).lower().strip()
        act = action
        if act == "b":
            backup = dirname + _timestamp()
            shutil.move(dirname, backup)
            info("Directory '%s' backed up to '%s'", dirname, backup)
        elif act == "d":
            shutil.rmtree(dirname, ignore_errors=True)
            if dir_nonempty(dirname):
                shutil.rmtree(dirname, ignore_errors=False)
        elif act == "n":
            dirname = dirname + _timestamp()
            info("Use a new log directory %s", dirname)
        elif act == "k":
            pass
        elif act == "q":
            raise OSError(f"Log directory '{dirname}' exists; quitting as asked (action 'q').")
        else:
            raise ValueError(f"Unknown log-directory action {action!r}; use one of k, d, b, n, q.")
    try:
        os.makedirs(dirname, exist_ok=True)
    except OSError as e:  # pragma: no cover
        if e.errno != errno.EEXIST:
            raise
    _lock_dir(dirname)
    LOG_DIR = dirname
    _set_file(os.path.join(dirname, "log.log"))


def _worker_log_dir(dirname: str) -> str:
    """``dirname`` on the chief (and outside a multi-process job); on every other rank a private
    temporary directory: the same script runs on every rank, and only the chief owns the
    directory (its lock, its checkpoints; actions 'd' and 'b' must not touch it from a worker).
    The rank comes from the launcher's variables (kerastrainer-run, TF_CONFIG, SLURM, horovodrun,
    mpirun; see ``utils.cluster``)."""
    info_ = get_cluster_info()
    if info_.size <= 1 or info_.rank == 0 or is_private_log_dir(dirname, info_.rank):
        return dirname
    tmp = os.path.normpath(private_log_dir(info_.rank))
    warning("Rank %d of %d (%s): the log directory '%s' is the chief's (rank 0); this worker logs to "
            "'%s' instead (removed at exit). Only the chief writes logs and checkpoints; "
            "utils.cluster.set_logger_dir_on_chief() does this without the warning.",
            info_.rank, info_.size, info_.source, dirname, tmp)
    return tmp


def _lock_dir(dirname: str) -> None:
    """Hold ``dirname``'s lock (one training per log directory), giving back the previous one."""
    global _DIR_LOCK
    if (_DIR_LOCK is not None and os.path.abspath(_DIR_LOCK.dirname) == os.path.abspath(dirname)
            and os.path.exists(_DIR_LOCK.path)):
        return
    if _DIR_LOCK is not None and not os.path.exists(_DIR_LOCK.path):
        _DIR_LOCK.release()  # its directory was deleted or moved (actions 'd', 'b')
        _DIR_LOCK = None
    lock = LogDirLock(dirname)
    lock.acquire()
    if _DIR_LOCK is not None:
        _DIR_LOCK.release()
    _DIR_LOCK = lock


def set_logger_dir_on_chief(dirname: str, action: Optional[str] = None) -> str:
    """The chief uses ``dirname`` as its log directory; every other worker a private temporary one.

    Only the chief writes logs, checkpoints and monitors' files; the others' temporary
    directory (removed when the process exits) keeps callbacks that need a directory
    working. Returns the directory this process uses. (``set_logger_dir`` does the same on a
    non-chief worker, with a warning: that is the script run unchanged on every rank.)
    Usually imported from ``kerastrainer.utils.cluster``.

    Example::

        set_logger_dir_on_chief('train_log/mnist', action='k')
        config = AutoResumeTrainConfig(...)    # workers get the chief's checkpoint by broadcast
    """
    info_ = get_cluster_info()
    if info_.rank == 0:
        set_logger_dir(dirname, action=action)
    else:
        set_logger_dir(private_log_dir(info_.rank))
    return get_logger_dir()


def auto_set_dir(action: Optional[str] = None, name: Optional[str] = None) -> str:
    """Use ``train_log/<script name>[:name]`` as the log directory; returns it."""
    mod = sys.modules["__main__"]
    basename = os.path.basename(getattr(mod, "__file__", "interactive") or "interactive")
    auto_dirname = os.path.join("train_log", basename[: basename.rfind(".")] if "." in basename else basename)
    if name:
        auto_dirname += "_%s" % name if os.name == "nt" else ":%s" % name
    set_logger_dir(auto_dirname, action=action)
    return LOG_DIR


def get_logger_dir() -> Optional[str]:
    """The directory set by :func:`set_logger_dir`, or None."""
    return LOG_DIR


def unset_logger_dir() -> None:
    """Forget the log directory (used between runs in one process, e.g. tests)."""
    global LOG_DIR, _FILE_HANDLER, _DIR_LOCK
    if _FILE_HANDLER is not None:
        _logger.removeHandler(_FILE_HANDLER)
        _FILE_HANDLER.close()
        _FILE_HANDLER = None
    if _DIR_LOCK is not None:
        _DIR_LOCK.release()
        _DIR_LOCK = None
    LOG_DIR = None
