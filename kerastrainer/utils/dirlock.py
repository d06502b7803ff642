"""One training per log directory: a lock file held for the run's life.

The lock is ``<logdir>/.lock``: an ``flock`` on it (released by the kernel when the
holder dies, however it dies) and, inside, who holds it (pid, host, start time,
command line), so that a second run can say whom it met.

Example::

    lock = LogDirLock('train_log/run1')
    lock.acquire()        # LogDirLockedError naming the holder if another run has it
    ...
    lock.release()
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import sys
import time
from typing import Optional

__all__ = ["LogDirLock", "LogDirLockedError", "LOCK_NAME"]

LOCK_NAME = ".lock"


class LogDirLockedError(RuntimeError):
    """Another training run holds the log directory."""


def _pid_alive(pid: int, since: Optional[float]) -> bool:
    """Whether ``pid`` runs on this host and is the process that took the lock (not a reuse)."""
    try:
        import psutil
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return since is None or proc.create_time() <= since + 1.0
    except ImportError:  # pragma: no cover - psutil is a dependency
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    except Exception:  # NoSuchProcess, AccessDenied on a foreign pid namespace
        return False


def _describe(holder: dict) -> str:
    started = holder.get("time")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if started else "an unknown time"
    cmd = holder.get("argv") or "?"
    return f"pid {holder.get('pid')} on host {holder.get('host')} (since {when}; command: {cmd})"


class LogDirLock:
    """An exclusive lock of a log directory for one training run (see the module docstring)."""

    def __init__(self, dirname: str):
        self.dirname = dirname
        self.path = os.path.join(dirname, LOCK_NAME)
        self._fd: Optional[int] = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def read_holder(self) -> dict:
        try:
            with open(self.path) as f:
                return json.loads(f.read() or "{}")
        except (OSError, ValueError):
            return {}

    def _holder_is_live_other(self, holder: dict) -> bool:
        pid = holder.get("pid")
        if not isinstance(pid, int) or pid == os.getpid():
            return False
        if holder.get("host") != socket.gethostname():
            return False  # the flock is free, so no process holds it on a shared file system either
        return _pid_alive(pid, holder.get("time"))

    def check_free(self) -> None:
        """Raise :class:`LogDirLockedError` if another live run holds the directory (takes nothing)."""
        if self._fd is not None or not os.path.exists(self.path):
            return
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._raise_locked(self.read_holder())
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        holder = self.read_holder()
        if self._holder_is_live_other(holder):
            self._raise_locked(holder)

    def _raise_locked(self, holder: dict):
        who = _describe(holder) if holder else "another process"
        raise LogDirLockedError(
            f"Log directory '{self.dirname}' is in use by another training run: {who}. Two runs in one "
            f"directory overwrite each other's checkpoints. Wait for it to finish, stop it, or use another "
            f"log directory. (If that run is gone, delete '{self.path}'.)")

    def acquire(self) -> None:
        """Take the lock, or raise :class:`LogDirLockedError` naming the holder at once."""
        if self._fd is not None:
            return
        os.makedirs(self.dirname, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            self._raise_locked(self.read_holder())
        holder = self.read_holder()
        if self._holder_is_live_other(holder):
            # a live process wrote the file but holds no flock (e.g. on a file system without
            # flock): trust the record
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            self._raise_locked(holder)
        if holder.get("pid") not in (None, os.getpid()):
            # the project logger by name: utils.logger configures it and takes this lock
            logging.getLogger("kerastrainer").warning(
                "Taking over the stale lock of log directory '%s', left by %s, which is no "
                "longer running.", self.dirname, _describe(holder))
        record = {"pid": os.getpid(), "host": socket.gethostname(), "time": time.time(),
                  "argv": " ".join(sys.argv)[:500]}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Give the lock back (the file stays; an unlocked file is free)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()

    def __del__(self):
        try:
            self.release()
        except Exception:
            pass
