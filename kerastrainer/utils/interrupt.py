"""See Ctrl-C while the main thread is blocked inside a native call.

Python runs a signal handler only when the main thread returns to the interpreter;
a training step blocked in TensorFlow (waiting on an empty input queue) never does.
:class:`SignalWatcher` registers a wakeup fd, so the C-level handler writes the
signal number to a socket the moment the signal arrives; a helper thread reads it
and calls ``on_signal`` (which must release the blocked call, e.g. by closing the
input queue). The usual Python handler (``KeyboardInterrupt``) then runs as soon as
the main thread is back. The same thread calls ``on_tick`` about once a second.

Python runs a signal's handler at the next bytecode of the main thread, and that may be
inside a finalizer (``__del__``, a ``weakref.finalize`` callback: a batch's shared-memory
slot, a TensorFlow object collected mid-loop). An exception raised there is "ignored":
the ``KeyboardInterrupt`` is printed and lost, and a loop that should stop goes on.
:func:`keep_interrupts_from_finalizers` installs an unraisable hook that sends such a
signal again, so its handler runs once more outside the finalizer.

Example::

    keep_interrupts_from_finalizers()
    with SignalWatcher(on_signal=lambda signum: queue_source.cancel()):
        run_training()
"""
from __future__ import annotations

import _thread
import contextlib
import os
import queue
import select
import signal
import socket
import sys
import threading
import time
from typing import Callable, Optional

__all__ = ["SignalWatcher", "keep_interrupts_from_finalizers", "finalizer_interrupts_kept"]

_STOP_SIGNAL_OF = {KeyboardInterrupt: signal.SIGINT}   # exception type -> the signal that raised it


def register_stop_exception(exc_type: type, signum: int) -> None:
    """Exceptions of ``exc_type`` raised by the handler of ``signum`` (a trainer's SIGTERM) are
    re-sent like ``KeyboardInterrupt`` when a finalizer swallows them."""
    _STOP_SIGNAL_OF[exc_type] = signum


def _resend_swallowed_stop(unraisable) -> bool:
    """The unraisable hook's work: True when ``unraisable`` was a stop signal's exception,
    lost in a finalizer of the main thread, and that signal was sent again."""
    exc_type = getattr(unraisable, "exc_type", None)
    signum = next((s for t, s in _STOP_SIGNAL_OF.items() if exc_type is not None and issubclass(exc_type, t)),
                  None)
    if signum is None or threading.current_thread() is not threading.main_thread():
        return False
    handler = signal.getsignal(signum)
    if not callable(handler):
        return False   # SIG_DFL / SIG_IGN: the exception did not come from a handler
    if getattr(getattr(handler, "__self__", None), "records_stop_signals", False):
        return True    # its owner (a trainer's StopSignals) acts on the signal anyway: no second one
    # sent again by the resender thread once this hook has returned: sent from here, the handler
    # would run inside the hook, where its exception is lost for good (a hook's own exception is
    # only printed). SimpleQueue.put runs no Python code, so no handler can run inside it.
    _RESEND_REQUESTS.put(signum)
    return True


_RESEND_REQUESTS: "queue.SimpleQueue[int]" = queue.SimpleQueue()
_in_hook = [0]        # > 0 while the main thread runs the unraisable hook
_resender = [None]    # the resender thread, started with the hook


def _resend_when_out_of_the_hook() -> None:
    """The resender thread: each requested signal is sent again once the main thread has left the
    hook (if it lands in another finalizer, the hook asks again)."""
    while True:
        signum = _RESEND_REQUESTS.get()
        time.sleep(0.001)
        while _in_hook[0]:
            time.sleep(0.001)
        _thread.interrupt_main(signum)


def _unraisable_hook(unraisable) -> None:
    _in_hook[0] += 1
    try:
        if not _resend_swallowed_stop(unraisable):
            _previous_hook(unraisable)
    finally:
        _in_hook[0] -= 1


_previous_hook = sys.unraisablehook


def keep_interrupts_from_finalizers() -> None:
    """Install (once) the unraisable hook that re-sends a stop signal lost in a finalizer.

    Every other unraisable exception goes to the hook that was there before."""
    global _previous_hook
    if _resender[0] is None or not _resender[0].is_alive():   # (a forked child has no threads)
        _resender[0] = threading.Thread(target=_resend_when_out_of_the_hook, name="resend-stop-signal",
                                        daemon=True)
        _resender[0].start()
    if sys.unraisablehook is _unraisable_hook:
        return
    _previous_hook = sys.unraisablehook
    sys.unraisablehook = _unraisable_hook


_kept = {"depth": 0, "installed": False}
_kept_lock = threading.Lock()


@contextlib.contextmanager
def finalizer_interrupts_kept():
    """:func:`keep_interrupts_from_finalizers` for the block: the hook is installed when the
    outermost block is entered and the hook that was there before is back when it ends (unless
    the program replaced ours in between). Training runs use this; nothing stays installed after."""
    with _kept_lock:
        _kept["depth"] += 1
        if _kept["depth"] == 1:
            _kept["installed"] = sys.unraisablehook is not _unraisable_hook
            keep_interrupts_from_finalizers()
    try:
        yield
    finally:
        with _kept_lock:
            _kept["depth"] -= 1
            if _kept["depth"] == 0 and _kept["installed"] and sys.unraisablehook is _unraisable_hook:
                sys.unraisablehook = _previous_hook
                _kept["installed"] = False


_WATCHING = [False]   # a SignalWatcher of this process has the wakeup fd


def _no_wakeup_fd_in_a_forked_child() -> None:
    # the child inherits the wakeup fd, a socket of the parent's watcher: a signal the child gets
    # (its runner's SIGTERM at clean-up) would reach the parent's watcher as the parent's own
    if _WATCHING[0]:
        _WATCHING[0] = False
        try:
            signal.set_wakeup_fd(-1)
        except (ValueError, OSError):
            pass


# (registered for the process, as os.register_at_fork cannot be undone; it does nothing unless a
# watcher is active when the process forks)
os.register_at_fork(after_in_child=_no_wakeup_fd_in_a_forked_child)


class SignalWatcher:
    """Call ``on_signal(signum)`` from a helper thread as soon as a handled signal arrives.

    Only active on the main thread (elsewhere it does nothing). ``on_tick()`` is called
    every ``tick_seconds`` while active. Exceptions from the callbacks are logged, never raised.
    """

    def __init__(self, on_signal: Callable[[int], None], on_tick: Optional[Callable[[], None]] = None,
                 tick_seconds: float = 1.0):
        self.on_signal = on_signal
        self.on_tick = on_tick
        self.tick_seconds = tick_seconds
        self._thread: Optional[threading.Thread] = None
        self._socks = None
        self._old_fd = -1
        self._stop = threading.Event()

    def __enter__(self):
        if threading.current_thread() is not threading.main_thread():
            return self
        r, w = socket.socketpair()
        r.setblocking(False)
        w.setblocking(False)
        try:
            self._old_fd = signal.set_wakeup_fd(w.fileno(), warn_on_full_buffer=False)
        except (ValueError, OSError):
            r.close()
            w.close()
            return self
        self._socks = (r, w)
        _WATCHING[0] = True
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="SignalWatcher", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._socks is None:
            return
        r, w = self._socks
        _WATCHING[0] = self._old_fd >= 0
        try:
            signal.set_wakeup_fd(self._old_fd)
        except (ValueError, OSError):
            pass
        self._stop.set()
        try:
            w.send(b"\0")  # wake the thread (0 is no signal)
        except OSError:
            pass
        self._thread.join(timeout=2)
        r.close()
        w.close()
        self._socks = None

    def _call(self, fn, *args):
        try:
            fn(*args)
        except Exception as e:  # a failing callback must not kill the watcher
            from . import logger
            logger.warning("SignalWatcher: %s failed: %s", getattr(fn, "__name__", fn), e)

    def _run(self):
        r = self._socks[0]
        while not self._stop.is_set():
            ready, _, _ = select.select([r], [], [], self.tick_seconds)
            if ready:
                try:
                    data = r.recv(64)
                except (BlockingIOError, InterruptedError):
                    data = b""
                if self._old_fd >= 0 and data:
                    try:  # whoever registered before us still gets their bytes
                        os.write(self._old_fd, data)
                    except OSError:
                        pass
                for signum in data:
                    if signum and not self._stop.is_set():
                        self._call(self.on_signal, signum)
            elif self.on_tick is not None and not self._stop.is_set():
                self._call(self.on_tick)
