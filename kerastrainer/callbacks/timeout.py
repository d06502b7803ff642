"""tensorpack's ``SessionRunTimeout``: a deadline on every train call.

tensorpack put ``RunOptions(timeout_in_ms=...)`` on each ``Session.run`` of a step, and a step
that ran longer failed with ``DeadlineExceededError``. Here the deadline is on the train call
(``timeout_in_ms`` per step, times the steps of the call): when it passes while the call still
runs, the input is cancelled (a step blocked waiting for data fails at once) and training stops
with :class:`SessionRunTimeoutError`, a ``tf.errors.DeadlineExceededError`` naming the callback
and the timeout; a call that computes past its deadline is not cut mid-op, it fails when it
returns. The first call of a step runner is not timed: it traces and compiles the step, which
tensorpack did before its first ``Session.run``.

Example::

    callbacks = [SessionRunTimeout(60000)]     # FasterRCNN's: a step that hangs a minute stops training
"""
from __future__ import annotations

import threading
import time

import tensorflow as tf

from ..utils import logger
from .base import Callback

__all__ = ["SessionRunTimeout", "SessionRunTimeoutError"]


class SessionRunTimeoutError(tf.errors.DeadlineExceededError):
    """A train call ran past :class:`SessionRunTimeout`'s deadline."""

    def __init__(self, message: str):
        super().__init__(None, None, message)


class _TimedRunner:
    """The trainer's step runner, each call under a deadline (everything else is the runner's)."""

    def __init__(self, runner, callback: "SessionRunTimeout"):
        self._runner = runner
        self._callback = callback
        self._calls = 0

    def __getattr__(self, name):
        return getattr(self._runner, name)

    def run(self, k: int):
        self._calls += 1
        if self._calls == 1:   # traces and compiles the step
            return self._runner.run(k)
        seconds = self._callback.timeout_ms * k / 1000.0
        expired = threading.Event()

        def expire():
            expired.set()
            cancel = getattr(self._callback.trainer.input, "cancel", None)
            if cancel is not None:
                cancel()   # a step waiting for data fails now

        timer = threading.Timer(seconds, expire)
        timer.daemon = True
        start = time.monotonic()
        timer.start()
        try:
            result = self._runner.run(k)
        except (tf.errors.CancelledError, tf.errors.OutOfRangeError) as e:
            if expired.is_set():
                raise self._callback.error(k, time.monotonic() - start) from e
            raise
        finally:
            timer.cancel()
        if expired.is_set():
            raise self._callback.error(k, time.monotonic() - start)
        return result


class SessionRunTimeout(Callback):
    """Stop training when a train call runs longer than ``timeout_in_ms`` per step (see the module doc).

    Example::

        TrainConfig(..., callbacks=[SessionRunTimeout(600000)])
    """

    _chief_only = False   # every worker's calls hang alike

    def __init__(self, timeout_in_ms: int):
        timeout = int(timeout_in_ms)
        if timeout <= 0:
            raise ValueError(f"SessionRunTimeout: timeout_in_ms must be positive, got {timeout_in_ms!r}.")
        self.timeout_ms = timeout

    def error(self, steps: int, seconds: float) -> SessionRunTimeoutError:
        return SessionRunTimeoutError(
            f"SessionRunTimeout({self.timeout_ms}): a train call of {steps} step(s) ran {seconds:.1f} s, past its "
            f"deadline of {self.timeout_ms * steps / 1000.0:g} s ({self.timeout_ms} ms per step); training stopped. "
            "A step waiting for input was cancelled: check the DataFlow (its workers, its speed), or give "
            "SessionRunTimeout a longer timeout.")

    def _wrap(self):
        runner = self.trainer.step_runner
        if runner is not None and not isinstance(runner, _TimedRunner):
            self.trainer.step_runner = _TimedRunner(runner, self)

    def _before_train(self):
        self._wrap()
        logger.info("SessionRunTimeout: each train call after the first must end within %d ms per step.",
                    self.timeout_ms)

    def _trigger_step(self):
        self._wrap()   # a trainer that made a new runner (a rebuilt step) is timed too

    def _after_train(self):
        runner = self.trainer.step_runner
        if isinstance(runner, _TimedRunner):
            self.trainer.step_runner = runner._runner
