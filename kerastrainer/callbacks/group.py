"""``Callbacks``: run a list of callbacks in order, timing each one.

The trainer holds one ``Callbacks`` group and calls its hooks; the group calls the
same hook of each member in order. Time spent in each member is accumulated over
the epoch and, when callbacks took a noticeable share of it, the slowest ones are
logged at the epoch's end (tensorpack's CallbackTimeLogger).

Example::

    cbs = Callbacks([ModelSaver(), ProgressBar()])
    cbs.setup_graph(trainer)
    cbs.before_train()
    ...
    k = cbs.steps_to_next_trigger()   # None, or the steps the next call may run
"""
from __future__ import annotations

import time
from collections import defaultdict
from typing import Dict, Iterable, List, Optional

from ..utils import logger
from .base import Callback, StopTraining

__all__ = ["Callbacks"]

# Log per-callback times at epoch end only when callbacks took at least this long.
_REPORT_MIN_SECONDS = 1.0
_REPORT_TOP_K = 3


def _name_the_callback(error: Exception, cb: Callback, hook: str) -> None:
    """Say which callback and hook raised ``error``: a log line, and a note on the exception
    itself (shown under its traceback), whose type stays the user's."""
    where = f"callback {cb} ({type(cb).__module__}.{type(cb).__name__}) failed in {hook}"
    if getattr(error, "_kerastrainer_callback", None) is not None:
        return   # a nested group named the innermost callback already
    try:
        error._kerastrainer_callback = where
    except AttributeError:   # an exception type without a __dict__
        pass
    # (the type only: the exception's own message follows in its traceback)
    logger.error("The %s (%s).", where, type(error).__name__)
    if hasattr(error, "add_note"):   # Python >= 3.11
        error.add_note(f"(kerastrainer: the {where})")


class Callbacks(Callback):
    """A group of callbacks run in order; a callback itself.

    Args:
        cbs: the callbacks. Each hook runs in list order, except that callbacks with
            ``_runs_first = True`` (the NaN guard) go before all others.

    If a member raises :class:`StopTraining`, the remaining members of that hook
    still run (so that monitors still write the epoch's statistics) and the
    ``StopTraining`` is raised again afterwards. Any other exception propagates at
    once, except in ``after_train``: there every member runs (to close files and
    progress bars), and the first error is raised at the end.

    ``steps_to_next_trigger()`` is the smallest request of the members, or None.
    """

    _chief_only = False

    def __init__(self, cbs: Iterable[Callback]):
        cbs = list(cbs)
        for i, cb in enumerate(cbs):
            if not isinstance(cb, Callback):
                raise TypeError(
                    f"Callbacks: item {i} ({cb!r}, of type {type(cb).__name__}) is not a Callback; "
                    "wrap plain functions in CallbackFactory(...).")
        # a callback that must judge a step before the others act on it (the NaN guard, before a
        # ModelSaver of the same step) says so with `_runs_first`; the order is otherwise kept
        cbs.sort(key=lambda cb: not getattr(cb, "_runs_first", False))
        self.cbs: List[Callback] = cbs
        self._epoch_times: Dict[int, float] = defaultdict(float)

    # --- running the members ---------------------------------------------------------------
    def _run(self, hook: str) -> None:
        stop: Optional[StopTraining] = None
        times = self._epoch_times
        for i, cb in enumerate(self.cbs):
            t0 = time.perf_counter()
            try:
                getattr(cb, hook)()
            except StopTraining as e:
                if stop is None:
                    stop = e
                logger.info("%s asked to stop training.", cb)
            except Exception as e:
                _name_the_callback(e, cb, hook)
                raise
            finally:
                times[i] += time.perf_counter() - t0
        if stop is not None:
            raise stop

    def _setup_graph(self):
        for cb in self.cbs:
            try:
                cb.setup_graph(self.trainer)
            except Exception as e:
                _name_the_callback(e, cb, "setup_graph")
                raise

    def _before_train(self):
        self._run("before_train")

    def _before_epoch(self):
        self._epoch_times.clear()
        self._run("before_epoch")

    def _trigger_step(self):
        self._run("trigger_step")

    def _after_epoch(self):
        self._run("after_epoch")

    def _trigger_epoch(self):
        try:
            self._run("trigger_epoch")
        finally:
            self._log_slow_callbacks()

    def _trigger(self):
        self._run("trigger")

    def _after_train(self):
        # clean-up hook: every member runs even if an earlier one fails; the first error is raised
        first: Optional[BaseException] = None
        for cb in self.cbs:
            try:
                cb.after_train()
            except StopTraining:
                pass
            except Exception as e:
                if first is None:
                    _name_the_callback(e, cb, "after_train")
                    first = e
                else:
                    logger.error("%s.after_train failed too: %r", cb, e)
        if first is not None:
            raise first

    def steps_to_next_trigger(self) -> Optional[int]:
        best = None
        for cb in self.cbs:
            k = cb.steps_to_next_trigger()
            if k is None:
                continue
            if k < 1:
                raise ValueError(
                    f"{cb}.steps_to_next_trigger() returned {k}; it must be None or a positive "
                    "number of steps.")
            if best is None or k < best:
                best = k
        return None if best is None else int(best)

    # --- timing ----------------------------------------------------------------------------
    def epoch_times(self) -> Dict[str, float]:
        """Seconds spent in each member so far in the current epoch, by callback name."""
        out: Dict[str, float] = {}
        for i, t in self._epoch_times.items():
            name = str(self.cbs[i])
            out[name] = out.get(name, 0.0) + t
        return out

    def _log_slow_callbacks(self) -> None:
        times = sorted(((t, str(self.cbs[i])) for i, t in self._epoch_times.items()), reverse=True)
        total = sum(t for t, _ in times)
        if total < _REPORT_MIN_SECONDS:
            return
        slow = [f"{name}: {t:.3g}s" for t, name in times[:_REPORT_TOP_K] if t >= 0.1 * total]
        logger.info("Callbacks took %.3g s in this epoch. Slowest: %s", total, ", ".join(slow))

    def __str__(self):
        return "Callbacks[" + ", ".join(str(cb) for cb in self.cbs) + "]"
