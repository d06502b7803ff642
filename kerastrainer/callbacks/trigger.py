"""Run a callback at other times than it would: periodically, or when a predicate holds.

- :class:`PeriodicTrigger`: call a callback's ``trigger()`` every k steps and/or
  every k epochs (its other hooks run as usual).
- :class:`EnableCallbackIf`: run a callback's per-epoch and per-step hooks only when
  a predicate holds.
- :class:`PeriodicCallback`: run a callback's per-epoch and per-step hooks only in
  the steps/epochs that are multiples of k.

Example::

    # save a checkpoint every 500 steps, and run validation every 2 epochs
    callbacks = [PeriodicTrigger(ModelSaver(), every_k_steps=500),
                 PeriodicTrigger(InferenceRunner(val_ds, ScalarStats('cost')), every_k_epochs=2)]
"""
from __future__ import annotations

from typing import Callable, Optional

from .base import Callback, ProxyCallback

__all__ = ["PeriodicTrigger", "PeriodicCallback", "EnableCallbackIf"]


def _check_k(owner: str, name: str, k) -> Optional[int]:
    if k is None:
        return None
    if isinstance(k, bool) or not isinstance(k, int) and not (isinstance(k, float) and k.is_integer()):
        raise TypeError(f"{owner}: {name} must be a positive integer or None, got {k!r}.")
    k = int(k)
    if k < 1:
        raise ValueError(f"{owner}: {name} must be a positive integer or None, got {k}.")
    return k


def _steps_to_multiple(global_step: int, k: int) -> int:
    """Steps from ``global_step`` to the next multiple of k (k itself when on a multiple)."""
    return k - global_step % k


def _crossed_multiple(trainer, k: int) -> bool:
    """Whether the last train call ended on or passed a multiple of k steps."""
    gs = int(trainer.global_step)
    done = max(int(trainer.last_call_steps), 1)
    return gs // k > max(gs - done, 0) // k


class PeriodicTrigger(ProxyCallback):
    """Call ``cb.trigger()`` every k steps and/or every k epochs.

    The wrapped callback's ``trigger_epoch`` is *not* run (its ``trigger`` replaces
    it), as in tensorpack; its other hooks run as usual. With ``every_k_steps`` it
    asks the trainer to end train calls exactly at multiples of k steps.

    Args:
        cb: the callback; its ``trigger()`` is what runs.
        every_k_steps: trigger after global steps k, 2k, ...
        every_k_epochs: trigger at the end of epochs k, 2k, ...
        before_train: also trigger once before training starts.

    Example::

        PeriodicTrigger(ModelSaver(), every_k_steps=1000, every_k_epochs=1)
    """

    _chief_only = False

    def __init__(self, cb: Callback, every_k_steps: Optional[int] = None,
                 every_k_epochs: Optional[int] = None, before_train: bool = False):
        if not isinstance(cb, Callback):
            raise TypeError(f"PeriodicTrigger wraps a Callback, got {type(cb).__name__}.")
        super().__init__(cb)
        self._step_k = _check_k("PeriodicTrigger", "every_k_steps", every_k_steps)
        self._epoch_k = _check_k("PeriodicTrigger", "every_k_epochs", every_k_epochs)
        if self._step_k is None and self._epoch_k is None and not before_train:
            raise ValueError("PeriodicTrigger: give every_k_steps, every_k_epochs, or before_train=True; "
                             "otherwise the callback would never trigger.")
        self._before_train_flag = bool(before_train)

    def _before_train(self):
        self.cb.before_train()
        if self._before_train_flag:
            self.cb.trigger()

    def _trigger_step(self):
        self.cb.trigger_step()
        if self._step_k is not None and _crossed_multiple(self.trainer, self._step_k):
            self.cb.trigger()

    def _trigger_epoch(self):
        if self._epoch_k is not None and self.epoch_num % self._epoch_k == 0:
            self.cb.trigger()

    def steps_to_next_trigger(self) -> Optional[int]:
        inner = self.cb.steps_to_next_trigger()
        if self._step_k is None:
            return inner
        mine = _steps_to_multiple(int(self.trainer.global_step), self._step_k)
        return mine if inner is None else min(mine, inner)

    def __str__(self):
        return "PeriodicTrigger-" + str(self.cb)


class EnableCallbackIf(ProxyCallback):
    """Run a callback's ``before_epoch``, ``after_epoch``, ``trigger_step``,
    ``trigger_epoch`` and ``trigger`` only when ``pred(self)`` is true.

    ``setup_graph``, ``before_train`` and ``after_train`` always run. ``pred`` gets
    this wrapper, so it can read ``self.epoch_num``, ``self.global_step``, ``self.trainer``.

    Example::

        # validation only in the last 10 epochs
        EnableCallbackIf(InferenceRunner(val_ds, ScalarStats('cost')),
                         lambda cb: cb.epoch_num > cb.trainer.max_epoch - 10)
    """

    _chief_only = False

    def __init__(self, callback: Callback, pred: Callable[["EnableCallbackIf"], bool]):
        if not isinstance(callback, Callback):
            raise TypeError(f"EnableCallbackIf wraps a Callback, got {type(callback).__name__}.")
        if not callable(pred):
            raise TypeError(f"EnableCallbackIf: pred must be callable, got {pred!r}.")
        super().__init__(callback)
        self._pred = pred

    def _enabled(self) -> bool:
        return bool(self._pred(self))

    def _before_epoch(self):
        if self._enabled():
            self.cb.before_epoch()

    def _after_epoch(self):
        if self._enabled():
            self.cb.after_epoch()

    def _trigger_step(self):
        if self._enabled():
            self.cb.trigger_step()

    def _trigger_epoch(self):
        if self._enabled():
            self.cb.trigger_epoch()

    def _trigger(self):
        if self._enabled():
            self.cb.trigger()

    def __str__(self):
        return "EnableCallbackIf-" + str(self.cb)


class PeriodicCallback(EnableCallbackIf):
    """Run a callback's per-epoch and per-step hooks only every k steps or every k epochs.

    Unlike :class:`PeriodicTrigger`, which only calls ``trigger()`` periodically, this
    enables all of the callback's ``before_epoch``, ``after_epoch``, ``trigger_step``,
    ``trigger_epoch`` and ``trigger`` in the steps (global_step a multiple of k) or
    epochs (epoch_num a multiple of k) that qualify.

    Example::

        PeriodicCallback(EstimatedTimeLeft(), every_k_epochs=5)
    """

    def __init__(self, callback: Callback, every_k_steps: Optional[int] = None,
                 every_k_epochs: Optional[int] = None):
        self._step_k = _check_k("PeriodicCallback", "every_k_steps", every_k_steps)
        self._epoch_k = _check_k("PeriodicCallback", "every_k_epochs", every_k_epochs)
        if self._step_k is None and self._epoch_k is None:
            raise ValueError("PeriodicCallback: give every_k_steps or every_k_epochs.")
        super().__init__(callback, PeriodicCallback._predicate)

    def _predicate(self) -> bool:
        if self._step_k is not None and _crossed_multiple(self.trainer, self._step_k):
            return True
        return self._epoch_k is not None and self.epoch_num % self._epoch_k == 0

    def steps_to_next_trigger(self) -> Optional[int]:
        inner = self.cb.steps_to_next_trigger()
        if self._step_k is None:
            return inner
        mine = _steps_to_multiple(int(self.trainer.global_step), self._step_k)
        return mine if inner is None else min(mine, inner)

    def __str__(self):
        return "PeriodicCallback-" + str(self.cb)
