"""Ctrl-C and SIGTERM during a training, from set-up to clean-up, and input that stalls: what a
helper thread watches. One concern, out of the Trainer.

What the user sees:

- Ctrl-C (SIGINT) during set-up (building, tracing, loading weights): set-up finishes, then
  training stops before its first step, through the callbacks' ``after_train``. A second
  Ctrl-C stops at once.
- During a call of the train function: the call ends (a step waiting for input is released
  at once), its steps are counted, ``after_train`` runs (``ModelSaver`` saves), and
  ``KeyboardInterrupt`` propagates. Between calls: at once, still through ``after_train``.
  A second Ctrl-C stops at once.
- SIGTERM (preemption, ``kill``), on single-process trainers: the same, ending in
  :class:`TrainingTerminated` (exit status 143).

How, and the races it closes:

- The C-level handler writes the signal to a wakeup fd; :class:`SignalWatcher`'s thread
  reads it and cancels the trainer's input, so a step blocked in TensorFlow fails at once.
  The Python handler (``_handle``) only runs when the main thread is back in Python.
- Both the Python handler and the watcher record the stop before anything is raised: if
  the handler's exception is lost (raised inside a finalizer, where Python ignores
  exceptions) the trainer still stops before or after its next call, or at the end of the
  scope (``requested``). (:func:`keep_interrupts_from_finalizers`, which sends such a signal
  again for other code, leaves the trainer's handler alone.)
- Nothing is raised during set-up: a KeyboardInterrupt inside TensorFlow's tracing can leave
  a context manager half entered, and TF then fails with an unrelated error.
- :func:`stop_signal_scope` installs the handlers inside its ``try`` and restores them in its
  ``finally``, only where they are still ours, so an interrupt during set-up or clean-up
  never leaves a dead trainer's handler installed for the rest of the process. A handler
  left by an earlier trainer of this process (one whose scope ended abnormally) is taken
  over; a handler the program installed itself is left alone, with a warning that Ctrl-C
  then cannot release a step waiting for input; an ignored SIGINT (``nohup``) stays ignored.

A stalled input is reported by :class:`InputStallReport`, which the same thread calls about
once a second: a call that has waited ``trainer.stall_report_seconds`` on an empty input is
logged, with the DataFlow's worker processes and their state, and again as often.

Example (what ``launch_train_with_config`` and ``Trainer.main_loop`` do)::

    with stop_signal_scope(trainer, setting_up=True):
        trainer.setup_graph(model, input)
        with stop_signal_scope(trainer) as stop:    # the same StopSignals
            stop.setting_up = False
            while ...:
                trainer.run_step_call(k)       # raises stop.exception() when stop.requested
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import weakref
from typing import Callable, Dict, Iterator, Optional

from ..utils import logger
from ..utils.concurrency import describe_child_processes
from ..utils.interrupt import SignalWatcher, finalizer_interrupts_kept, register_stop_exception

__all__ = ["StopSignals", "TrainingTerminated", "InputStallReport", "stop_signal_scope"]


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

    def __init__(self, trainer, graceful_sigterm: bool = True, on_tick: Optional[Callable[[], None]] = None,
                 setting_up: bool = False):
        self.trainer = trainer
        self.graceful_sigterm = graceful_sigterm
        # during set-up the first signal is recorded, not raised: raised inside TensorFlow's tracing it
        # can leave a context manager entered (TF then fails with "Exiting variable_creator_scope
        # without proper nesting" instead of the KeyboardInterrupt); the first call raises it
        self.setting_up = setting_up
        self.raised = False                  # the stop's exception was raised (by the handler or the trainer)
        self.signum: Optional[int] = None    # the stop signal that came
        self.seen = False                    # the Python handler ran (its exception may have been lost)
        self.interrupted = False             # the Python handler ran during a call: stop after it
        self.cancelled = False               # the watcher cancelled the input to end a blocked wait
        self._own: Dict[int, object] = {}    # signal -> the handler ours replaced
        self._watcher = SignalWatcher(self._on_watcher_signal, on_tick)
        self._kept = None                    # the finalizer-interrupt hook, for the scope

    # --- installing and restoring ----------------------------------------------------------
    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            self._kept = finalizer_interrupts_kept()
            self._kept.__enter__()
            self._install()
            self._watcher.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._restore()          # first: a signal from here on gets Python's usual handling
        self._watcher.__exit__(None, None, None)
        kept, self._kept = self._kept, None
        if kept is not None:
            kept.__exit__(None, None, None)

    def _install(self) -> None:
        _ACTIVE.add(self)
        wanted = [(signal.SIGINT, signal.default_int_handler)]
        if self.graceful_sigterm:
            wanted.append((signal.SIGTERM, signal.SIG_DFL))
        for signum, default in wanted:
            old = signal.getsignal(signum)
            stale = _stale_handler(old)
            if old is not default and not stale:
                # SIG_IGN: ignored on purpose by whoever started the process (nohup, a background job)
                if signum == signal.SIGINT and old is not signal.SIG_IGN:
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
        return self.seen or self.cancelled

    def exception(self) -> BaseException:
        """The exception the stop ends in (the caller raises it)."""
        self.raised = True
        return TrainingTerminated() if self.signum == signal.SIGTERM else KeyboardInterrupt()

    def _handle(self, signum, frame):
        """The Python handler (main thread)."""
        if self.signum is None:   # (the watcher thread may have seen it first)
            self.signum = signum
        # recorded before anything is raised: raised inside a finalizer, the exception is lost, and
        # the trainer still stops at its next check (before and after every call)
        first = not self.seen
        self.seen = True
        name = "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C"
        if self.setting_up and first:
            logger.info("%s: stopping once set-up ends (press again to stop at once).", name)
            return
        if self.trainer._call_started is not None and not self.interrupted:
            self.interrupted = True
            if signum == signal.SIGTERM:
                logger.info("SIGTERM: stopping after the current call, then saving.")
            else:
                logger.info("Ctrl-C: stopping after the current call (press again to stop at once).")
            return
        # outside a call, or a second signal: at once, still through the callbacks' after_train (not
        # marked raised: if a finalizer swallows it, the trainer raises it at its next check)
        raise TrainingTerminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    def _on_watcher_signal(self, signum: int) -> None:
        """Watcher thread: a stop signal while a step may be blocked waiting for data: fail the wait now."""
        if signum not in self._own:
            return
        if self.signum is None:
            self.signum = signum
        self.cancelled = True
        if self.trainer.input is not None and not self.setting_up:   # (no call waits during set-up)
            self.trainer.input.cancel()


@contextlib.contextmanager
def stop_signal_scope(trainer, setting_up: bool = False) -> Iterator[StopSignals]:
    """``trainer``'s :class:`StopSignals` for the scope (``trainer._stop``): the enclosing one where
    a scope is open already (launch, then set-up, then the main loop nest), else a new one, whose
    handlers are restored at its end. A stop that came in the scope and whose exception was never
    raised (lost in a finalizer, or it came after the last call) is raised at the outermost end.

    ``setting_up``: a new scope starts in set-up, where the first signal is only recorded."""
    if trainer._stop is not None:
        yield trainer._stop
        return
    stop = None
    try:
        stop = trainer._stop = StopSignals(trainer, trainer.graceful_sigterm, on_tick=InputStallReport(trainer),
                                           setting_up=setting_up)
        stop.__enter__()
        yield stop
    finally:
        try:
            if stop is not None:
                stop.__exit__()
        finally:
            trainer._stop = None
    if stop.requested and not stop.raised:
        raise stop.exception()


def _handlers_back_in_a_forked_child() -> None:
    """A process forked while a trainer handles the signals (DataFlow workers started during
    set-up or training) starts with the handlers the trainer replaced: a worker must die on the
    SIGTERM its runner sends at clean-up, not log "stopping" and live on."""
    for stop in list(_ACTIVE):
        stop._restore()


# (for the process, as os.register_at_fork cannot be undone; it does nothing when no trainer is active)
os.register_at_fork(after_in_child=_handlers_back_in_a_forked_child)


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
