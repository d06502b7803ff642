"""What a helper thread watches during a trainer's main loop: Ctrl-C and SIGTERM, and input
that stalls. One concern, out of the Trainer.

What the user sees:

- Ctrl-C (SIGINT) during a call of the train function: the call ends (a step waiting for
  input is released at once), its steps are counted, the callbacks' ``after_train`` runs
  (``ModelSaver`` saves), and ``KeyboardInterrupt`` propagates. Between calls: at once,
  still through ``after_train``. A second Ctrl-C stops at once.
- SIGTERM (preemption, ``kill``), on single-process trainers: the same, ending in
  :class:`TrainingTerminated` (exit status 143).

How, and the races it closes:

- The C-level handler writes the signal to a wakeup fd; :class:`SignalWatcher`'s thread
  reads it and cancels the trainer's input, so a step blocked in TensorFlow fails at once.
  The Python handler (``_handle``) only runs when the main thread is back in Python.
- The watcher records the stop too: if the Python handler's exception is lost (raised
  inside a finalizer, where Python ignores exceptions) the trainer still stops after the
  call (``requested``). (:func:`keep_interrupts_from_finalizers`, which sends such a signal
  again for other code, leaves the trainer's handler alone.)
- The handlers are installed inside the main loop's ``try`` and restored first thing in
  its ``finally``, and only where they are still ours, so an interrupt during set-up or
  clean-up never leaves a dead trainer's handler installed for the rest of the process.
  A handler left by an earlier trainer of this process (one whose loop ended abnormally)
  is taken over; a handler the program installed itself is left alone, with a warning that
  Ctrl-C then cannot release a step waiting for input.

A stalled input is reported by :class:`InputStallReport`, which the same thread calls about
once a second: a call that has waited ``trainer.stall_report_seconds`` on an empty input is
logged, with the DataFlow's worker processes and their state, and again as often.

Example (what ``Trainer.main_loop`` does)::

    with StopSignals(trainer, graceful_sigterm=True, on_tick=InputStallReport(trainer)) as stop:
        while ...:
            trainer.run_step_call(k)       # raises stop.exception() when stop.requested
"""
from __future__ import annotations

import signal
import threading
import time
import weakref
from typing import Callable, Dict, Optional

from ..utils import logger
from ..utils.concurrency import describe_child_processes
from ..utils.interrupt import SignalWatcher, keep_interrupts_from_finalizers, register_stop_exception

__all__ = ["StopSignals", "TrainingTerminated", "InputStallReport"]


class TrainingTerminated(SystemExit):
    """Training stopped on SIGTERM (a scheduler's preemption, ``kill``), after the callbacks'
    end of training (``ModelSaver`` saves the last step). Uncaught, the program exits with
    status 143 (128 + SIGTERM), as a process killed by it; ``finally`` blocks still run."""

    def __init__(self):
        super().__init__(128 + signal.SIGTERM)


register_stop_exception(TrainingTerminated, signal.SIGTERM)

# every StopSignals whose handlers are installed: a handler of one not in here is stale
_ACTIVE: "weakref.WeakSet[StopSignals]" = weakref.WeakSet()


class StopSignals:
    """Ctrl-C / SIGTERM handling for one run of a trainer's main loop (see the module docstring).

    ``trainer`` must have ``_call_started`` (None between calls) and ``input`` (with ``cancel()``).
    """

    # the watcher records every stop signal: one whose exception a finalizer swallowed is not re-sent
    # (re-sent, it would interrupt the callbacks' after_train of the stop it already caused)
    records_stop_signals = True

    def __init__(self, trainer, graceful_sigterm: bool = True, on_tick: Optional[Callable[[], None]] = None):
        self.trainer = trainer
        self.graceful_sigterm = graceful_sigterm
        self.signum: Optional[int] = None    # the stop signal that came
        self.interrupted = False             # the Python handler ran during a call: stop after it
        self.cancelled = False               # the watcher cancelled the input to end a blocked wait
        self._own: Dict[int, object] = {}    # signal -> the handler ours replaced
        self._watcher = SignalWatcher(self._on_watcher_signal, on_tick)

    # --- installing and restoring ----------------------------------------------------------
    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            keep_interrupts_from_finalizers()
            self._install()
            self._watcher.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._restore()          # first: a signal from here on gets Python's usual handling
        self._watcher.__exit__(None, None, None)

    def _install(self) -> None:
        _ACTIVE.add(self)
        wanted = [(signal.SIGINT, signal.default_int_handler)]
        if self.graceful_sigterm:
            wanted.append((signal.SIGTERM, signal.SIG_DFL))
        for signum, default in wanted:
            old = signal.getsignal(signum)
            stale = _stale_handler(old)
            if old is not default and not stale:
                if signum == signal.SIGINT:
                    logger.warning("SIGINT has the program's own handler (%r): Ctrl-C is left to it, and it "
                                   "cannot release a step waiting for input (it runs once the step returns).",
                                   old)
                continue
            signal.signal(signum, self._handle)
            self._own[signum] = default if stale else old

    def _restore(self) -> None:
        own, self._own = self._own, {}
        _ACTIVE.discard(self)
        for signum, old in own.items():
            current = signal.getsignal(signum)
            if getattr(current, "__self__", None) is self:   # not replaced since by the program
                signal.signal(signum, old)

    # --- what a signal does ----------------------------------------------------------------
    @property
    def requested(self) -> bool:
        """A stop signal came (seen by the Python handler or by the watcher)."""
        return self.interrupted or self.cancelled

    def exception(self) -> BaseException:
        return TrainingTerminated() if self.signum == signal.SIGTERM else KeyboardInterrupt()

    def _handle(self, signum, frame):
        """The Python handler (main thread)."""
        if self.signum is None:   # (the watcher thread may have seen it first)
            self.signum = signum
        if self.trainer._call_started is not None and not self.interrupted:
            self.interrupted = True
            if signum == signal.SIGTERM:
                logger.info("SIGTERM: stopping after the current call, then saving.")
            else:
                logger.info("Ctrl-C: stopping after the current call (press again to stop at once).")
            return
        # outside a call, or a second signal: at once, still through the callbacks' after_train
        raise TrainingTerminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    def _on_watcher_signal(self, signum: int) -> None:
        """Watcher thread: a stop signal while a step may be blocked waiting for data: fail the wait now."""
        if signum not in self._own:
            return
        if self.signum is None:
            self.signum = signum
        self.cancelled = True
        if self.trainer.input is not None:
            self.trainer.input.cancel()


def _stale_handler(handler) -> bool:
    """``handler`` is the handler of a StopSignals that is no longer active (its loop ended
    without restoring it): no program installed it, so it is taken over."""
    owner = getattr(handler, "__self__", None)
    return isinstance(owner, StopSignals) and owner not in _ACTIVE


class InputStallReport:
    """Watcher thread, about once a second: report a call that has waited long on an empty input.

    ``trainer`` needs ``_call_started`` (a ``time.monotonic()`` or None), ``input`` (with
    ``fill_level()``) and ``stall_report_seconds``."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.reported = 0.0   # the wait of the call in progress last reported (s)

    def __call__(self) -> None:
        tr = self.trainer
        started = tr._call_started
        if started is None:
            self.reported = 0.0
            return
        waited = time.monotonic() - started
        if waited < max(tr.stall_report_seconds, self.reported + tr.stall_report_seconds):
            return
        if tr.input.fill_level() != 0:
            return
        self.reported = waited
        logger.warning("Training has waited %.0f s for input: %s has no batch ready. Worker processes: %s. "
                       "A worker that is 'stopped' was paused (SIGSTOP/Ctrl-Z); one that is 'running' is "
                       "slow or stuck in the DataFlow. Ctrl-C stops training.",
                       waited, type(tr.input).__name__, describe_child_processes())
