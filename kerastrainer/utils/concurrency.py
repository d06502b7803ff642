"""Process and thread helpers for DataFlow workers. No TensorFlow here.

The helpers keep worker processes from outliving their parent and describe why
a worker ended in words a user can act on.

Example::

    import multiprocessing as mp
    from kerastrainer.utils.concurrency import die_with_parent, stop_processes

    def work(parent_pid):
        die_with_parent(parent_pid)   # first thing in the child, right after fork
        ...

    p = mp.get_context("fork").Process(target=work, args=(os.getpid(),), daemon=True)
    p.start()
    ...
    stop_processes([p])
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time
from typing import Iterable, Optional

__all__ = ["join_thread", "enable_death_signal", "die_with_parent", "start_parent_watchdog", "describe_exitcode",
           "stop_processes", "StoppableThread", "mp_fork_context", "opencv_threads_idle",
           "LoopThread", "ShareSessionThread", "ensure_proc_terminate", "start_proc_mask_signal", "mask_sigint"]

_PR_SET_PDEATHSIG = 1
_libc = None


def _get_libc():
    global _libc
    if _libc is None:
        name = ctypes.util.find_library("c") or "libc.so.6"
        _libc = ctypes.CDLL(name, use_errno=True)
    return _libc


def enable_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent thread dies.

    Linux only (``prctl(PR_SET_PDEATHSIG)``); elsewhere a no-op that returns False.
    Note the kernel's rule: the signal fires when the *thread* that forked us
    exits, so only rely on it when the fork happened on a long-lived thread.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        ret = _get_libc().prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        return False
    return ret == 0


def start_parent_watchdog(parent_pid: int, interval: float = 0.5) -> threading.Thread:
    """Start a daemon thread that ends this process (``os._exit``) once ``parent_pid`` is gone.

    Works on every POSIX system, and covers the cases PR_SET_PDEATHSIG does not
    (fork from a short-lived thread, non-Linux): the parent's death re-parents us,
    which changes ``os.getppid()``.
    """
    def watch():
        while True:
            if os.getppid() != parent_pid:
                os._exit(1)
            time.sleep(interval)

    t = threading.Thread(target=watch, name="parent-watchdog", daemon=True)
    t.start()
    return t


def die_with_parent(parent_pid: int, use_pdeathsig: bool = True) -> None:
    """Make the calling (child) process die within a second of ``parent_pid``.

    Call it first thing in a forked child. Sets PR_SET_PDEATHSIG (when
    ``use_pdeathsig``), then checks the parent is still the same process (it may
    have died between ``fork`` and ``prctl``), then starts the watchdog thread.
    """
    if use_pdeathsig:
        enable_death_signal(signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(1)
    start_parent_watchdog(parent_pid)


def describe_exitcode(exitcode: Optional[int]) -> str:
    """Words for a ``multiprocessing.Process.exitcode``: 'killed by signal SIGKILL (9)', ..."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = "unknown signal"
        return f"killed by signal {name} ({-exitcode})"
    return f"exited with code {exitcode}"


def stop_processes(procs: Iterable, timeout: float = 1.0) -> None:
    """Terminate (SIGTERM), then kill (SIGKILL) what is left, and join every process.

    ``procs`` are ``multiprocessing.Process`` objects started by this process;
    ones never started or already joined are skipped. Never blocks much longer
    than ``2 * timeout``.
    """
    procs = [p for p in procs if getattr(p, "_popen", None) is not None]
    for p in procs:
        if p.exitcode is None:
            try:
                p.terminate()
                os.kill(p.pid, signal.SIGCONT)  # a stopped (SIGSTOP) worker acts on SIGTERM only once resumed
            except (OSError, AttributeError, TypeError):
                pass
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.exitcode is None:
            try:
                p.kill()
            except (OSError, AttributeError):
                pass
            p.join(timeout)


def join_thread(thread: threading.Thread, timeout: float) -> None:
    """``thread.join(timeout)``, also for a thread whose ``start()`` was interrupted (a Ctrl-C
    while ``start()`` waited for it to begin): ``join`` then raises RuntimeError although the
    thread may be running. It is waited for up to ``timeout`` too; one never started is left."""
    start = time.monotonic()
    deadline = start + timeout
    while True:
        try:
            thread.join(max(0.0, deadline - time.monotonic()))
            return
        except RuntimeError:   # not started yet, as far as join can tell
            now = time.monotonic()
            # a thread that runs has its ident at once; none after a moment: it never started
            if now >= deadline or (thread.ident is None and now - start > 0.2):
                return
            time.sleep(0.01)


class StoppableThread(threading.Thread):
    """A daemon thread with a stop event; its loop should check ``self.stopped()``.

    Example::

        class Worker(StoppableThread):
            def run(self):
                while not self.stopped():
                    ...

        t = Worker(); t.start(); ...; t.stop(); t.join()
    """

    def __init__(self, name: Optional[str] = None):
        super().__init__(name=name, daemon=True)
        self._stop_evt = threading.Event()

    def stop(self) -> None:
        """Ask the thread to stop; it ends at its next check."""
        self._stop_evt.set()

    def stopped(self) -> bool:
        return self._stop_evt.is_set()

    def wait_stopped(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds, waking early when stopped; return ``stopped()``."""
        return self._stop_evt.wait(timeout)


@contextlib.contextmanager
def opencv_threads_idle():
    """Fork with OpenCV's thread pool stopped, then restore it.

    A child forked while the parent's OpenCV pool has threads inherits a pool whose threads
    do not exist: its first parallel OpenCV call (resize, blur, setNumThreads) hangs for
    ever. One thread while forking leaves the child a serial OpenCV that works. Only acts
    when the parent has imported cv2.
    """
    cv2 = sys.modules.get("cv2")
    set_threads = getattr(cv2, "setNumThreads", None)
    if set_threads is None:
        yield
        return
    n = cv2.getNumThreads()
    set_threads(1)
    try:
        yield
    finally:
        set_threads(n)


def no_numpy_huge_pages() -> bool:
    """Stop numpy from asking for transparent huge pages for its large arrays, in this process.

    numpy advises huge pages for every array of 4 MiB or more. A DataFlow worker makes a new
    batch, copies it out and drops it, so the kernel zeroes fresh 2 MiB pages for each one:
    10-20% of a JPEG worker's CPU time (``bench/jpeg_pipeline.py``). Returns whether it acted.
    """
    import numpy as np
    core = getattr(np, "_core", None) or getattr(np, "core", None)
    setter = getattr(getattr(core, "multiarray", None), "_set_madvise_hugepage", None)
    if setter is None:
        return False
    setter(False)
    return True


def mp_fork_context():
    """The multiprocessing context DataFlow workers use: ``fork`` where it exists.

    Forked workers do not re-import the parent's modules (TensorFlow above all).
    """
    import multiprocessing as mp
    try:
        return mp.get_context("fork")
    except ValueError:  # pragma: no cover - Windows
        return mp.get_context()


def describe_child_processes() -> str:
    """'pid 12 (MultiProcessRunnerZMQ-0, stopped), ...' for every descendant of this process."""
    try:
        import psutil
        kids = psutil.Process().children(recursive=True)
    except Exception as e:  # pragma: no cover - psutil is a dependency
        return f"(cannot list them: {e})"
    parts = []
    for p in kids:
        try:
            parts.append(f"pid {p.pid} ({p.name()}, {p.status()})")
        except Exception:
            parts.append(f"pid {p.pid} (gone)")
    return ", ".join(parts) if parts else "none"


class LoopThread(StoppableThread):
    """A daemon thread that calls ``func()`` in a loop until :meth:`stop`; with ``pausable``,
    :meth:`pause` / :meth:`resume` hold it between calls (tensorpack's ``LoopThread``).

    Example::

        t = LoopThread(lambda: q.put(produce()))
        t.start(); ...; t.stop()
    """

    def __init__(self, func, pausable: bool = True):
        super().__init__()
        self.daemon = True
        self._func = func
        self._pausable = pausable
        self._running = threading.Event()
        self._running.set()

    def run(self):
        while not self.stopped():
            if self._pausable:
                while not self._running.wait(0.1):
                    if self.stopped():
                        return
            self._func()

    def pause(self) -> None:
        if not self._pausable:
            raise RuntimeError("LoopThread(pausable=False) cannot pause")
        self._running.clear()

    def resume(self) -> None:
        self._running.set()


_SHARE_SESSION_WARNED = False


class ShareSessionThread(threading.Thread):
    """tensorpack ran ``th`` inside the trainer's default TF1 session. TF2 has no session and eager
    ops run in any thread, so this runs the thread as it is (warned once).

    Example::

        ShareSessionThread(threading.Thread(target=predict_loop)).start()
    """

    __tensorpack_status__ = ("warns", "runs the thread as is: TF2 has no session to share (warned)")

    def __init__(self, th: Optional[threading.Thread] = None):
        super().__init__()
        if th is not None:
            if not isinstance(th, threading.Thread):
                raise TypeError(f"ShareSessionThread: th must be a threading.Thread, got {type(th).__name__}")
            self._th = th
            self.name = th.name
            self.daemon = th.daemon
        global _SHARE_SESSION_WARNED
        if not _SHARE_SESSION_WARNED:
            _SHARE_SESSION_WARNED = True
            from . import logger
            logger.warning("ShareSessionThread: TF2 has no session to share; the thread runs as it is "
                           "(eager TensorFlow works from any thread).")

    def start(self):
        if getattr(self, "_th", None) is not None:
            self._th.start()
        else:
            super().start()

    def join(self, timeout=None):
        if getattr(self, "_th", None) is not None:
            return self._th.join(timeout)
        return super().join(timeout)

    def is_alive(self) -> bool:
        th = getattr(self, "_th", None)
        return th.is_alive() if th is not None else super().is_alive()


def ensure_proc_terminate(proc) -> None:
    """Make sure ``proc`` (a ``multiprocessing.Process``, or a list) is terminated when this
    process exits (``atexit``).

    Example::

        p = mp.Process(target=work); ensure_proc_terminate(p); p.start()
    """
    import atexit
    import multiprocessing as mp
    import weakref
    if isinstance(proc, (list, tuple)):
        for p in proc:
            ensure_proc_terminate(p)
        return
    if not isinstance(proc, mp.process.BaseProcess):
        raise TypeError(f"ensure_proc_terminate: {type(proc).__name__} is not a multiprocessing.Process")

    def stop(ref):
        p = ref()
        if p is None or p.pid is None or not p.is_alive():  # gone, or never started
            return
        p.terminate()
        p.join(1.0)

    atexit.register(stop, weakref.ref(proc))


@contextlib.contextmanager
def mask_sigint():
    """In the main thread: ignore SIGINT inside the block (children started there inherit it), and
    restore the handler after. Elsewhere a no-op (signals belong to the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield True
    finally:
        signal.signal(signal.SIGINT, old)


def start_proc_mask_signal(proc) -> None:
    """Start ``proc`` (one or a list of processes or threads) with SIGINT ignored in the
    processes, so that Ctrl-C reaches only this process.

    Example::

        start_proc_mask_signal([mp.Process(target=work, daemon=True)])
    """
    import multiprocessing as mp
    procs = proc if isinstance(proc, (list, tuple)) else [proc]
    for p in procs:
        if isinstance(p, mp.process.BaseProcess):
            with mask_sigint():
                p.start()
        else:
            p.start()
