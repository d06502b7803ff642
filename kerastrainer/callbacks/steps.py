"""Callbacks that read the outputs of each train call.

- :class:`MovingAverageSummary`: smooths ``trainer.last_step_outputs`` (the cost and
  every ``add_moving_summary`` scalar) with an exponential moving average and puts
  the result into the monitors.
- :class:`TerminateOnNonFinite` (alias ``TerminateOnNaN``): stops training with a
  :class:`NonFiniteLossError` naming the first step whose cost was NaN or Inf.
- :class:`TensorPrinter`, :class:`SimpleMovingAverage`: print / average named step values
  (model variables or step outputs, as ``callbacks/graph.py`` reads them) every step.
- ``ProgressBar`` (``callbacks/prog.py``) and ``SessionRunTimeout`` (``callbacks/timeout.py``) at
  tensorpack's path.

Example::

    callbacks = [MovingAverageSummary(decay=0.9), TerminateOnNonFinite()]
"""
from __future__ import annotations

import math
from collections import deque
from typing import Dict, Optional, Sequence

import numpy as np

from ..tfutils.optimizer_check import describe_nonfinite_hyperparameters
from ..utils import logger
from .base import Callback
from .graph import read_named_values
from .prog import ProgressBar
from .timeout import SessionRunTimeout  # noqa: F401 (tensorpack's path of it)

__all__ = ["MovingAverageSummary", "TerminateOnNonFinite", "TerminateOnNaN", "NonFiniteLossError",
           "ProgressBar", "TensorPrinter", "SessionRunTimeout", "SimpleMovingAverage"]


class MovingAverageSummary(Callback):
    """Exponential moving averages of the train call outputs, put as scalars.

    After each call of ``k`` steps whose outputs are averaged over those steps, each
    average moves as if updated once per step with the same value::

        ema = ema * decay**k + value * (1 - decay**k)

    so the smoothing does not depend on ``steps_per_call``. The first value of a
    statistic starts its average. Keys starting with ``_`` are internal and skipped.

    It runs on every worker (``chief_only = False``): it is cheap, and callbacks that
    read statistics back (e.g. :class:`StatMonitorParamSetter`, which must run
    everywhere) need the same values on every worker.

    Args:
        decay: the per-step decay, in [0, 1).

    Example::

        MovingAverageSummary(decay=0.99)   # smoother curves
    """

    _chief_only = False

    def __init__(self, decay: float = 0.95):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"MovingAverageSummary: decay must be in [0, 1), got {decay}.")
        self.decay = float(decay)
        self._ema: Dict[str, float] = {}

    @property
    def averages(self) -> Dict[str, float]:
        """The current moving averages, by name."""
        return dict(self._ema)

    def _trigger_step(self):
        outputs = self.trainer.last_step_outputs
        k = max(int(self.trainer.last_call_steps), 1)
        keep = self.decay ** k
        monitors = self.trainer.monitors
        for name, value in outputs.items():
            if name.startswith("_"):
                continue
            value = float(value)
            old = self._ema.get(name)
            # a NaN once would poison the average forever; restart from the new value instead
            if old is None or not math.isfinite(old):
                ema = value
            else:
                ema = old * keep + value * (1.0 - keep)
            self._ema[name] = ema
            monitors.put_scalar(name, ema)


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN or Inf cost. ``global_step`` is the first such step, as the trainer numbers it."""

    def __init__(self, message: str, global_step: Optional[int] = None):
        super().__init__(message)
        self.global_step = global_step


class TerminateOnNonFinite(Callback):
    """Stop training as soon as a train call saw a NaN or Inf cost or gradient (Keras: TerminateOnNaN).

    The trainer reports in ``last_step_outputs['_nonfinite_step']`` the first global
    step of the call whose cost or gradients were not finite (or -1); gradients alone
    (a finite cost) point at the input data. This callback raises
    :class:`NonFiniteLossError` naming that step. Where that key is missing it
    checks the call's average cost instead and names the call's range of steps.
    It runs on every worker, so that all of them stop together. Before the first step, and
    whenever the cost is NaN, the optimizers' hyper-parameters are checked: a NaN or Inf
    learning rate (or beta, epsilon...) is named as the cause.

    Example::

        try:
            launch_train_with_config(config, trainer)
        except NonFiniteLossError as e:
            print("diverged at step", e.global_step)
    """

    _chief_only = False
    _runs_first = True  # before a ModelSaver triggered at the same step

    def _before_train(self):
        # after session_init: a restored or code-given NaN learning rate is named before any step
        bad = describe_nonfinite_hyperparameters(self.trainer)
        if bad:
            raise NonFiniteLossError(f"Training cannot start: {bad}. Give finite values (ModelDesc.optimizer(), "
                                     "a schedule, a checkpoint).", global_step=self.global_step)

    def _blame(self, default: str) -> str:
        """The advice of a NaN cost: the optimizer's non-finite hyper-parameter when it has one."""
        bad = describe_nonfinite_hyperparameters(self.trainer)
        if bad:
            return (f"The cause is the optimizer, not the cost: {bad} (set by a schedule or a "
                    "HyperParamSetter?); keep it finite.")
        return default

    def _trigger_step(self):
        outputs = self.trainer.last_step_outputs
        bad = outputs.get("_nonfinite_step")
        if bad is not None:
            bad = int(bad)
            if bad >= 0:
                name, cost = self.trainer.step_loss()
                if outputs.get("_nonfinite_grads_step", -1) == bad and cost is not None \
                        and math.isfinite(float(cost)):
                    raise NonFiniteLossError(
                        f"The gradients became NaN or Inf at global step {bad} (epoch {self.epoch_num}) while "
                        f"the cost stayed finite (the call's '{name}': {cost}): the usual cause is NaN or Inf "
                        "in that step's input batch (check the DataFlow, e.g. with a MapData that asserts "
                        "np.isfinite), else an op whose gradient is undefined there (sqrt or log at 0).",
                        global_step=bad)
                raise NonFiniteLossError(
                    f"The cost became NaN or Inf at global step {bad} (epoch {self.epoch_num}; "
                    f"the call's '{name}': {cost}). " + self._blame(
                        "Lower the learning rate, check the input data for NaN/Inf, or clip gradients."),
                    global_step=bad)
            return
        name, cost = self.trainer.step_loss()
        if cost is not None and not math.isfinite(float(cost)):
            k = max(int(self.trainer.last_call_steps), 1)
            first = self.global_step - k + 1
            where = f"global step {first}" if k == 1 else f"global steps {first}-{self.global_step}"
            raise NonFiniteLossError(
                f"The cost became {cost} in {where} (epoch {self.epoch_num}). " + self._blame(
                    "Lower the learning rate, check the input data for NaN/Inf, or clip gradients."),
                global_step=first)


# Keras' name, so that Keras users find it.
TerminateOnNaN = TerminateOnNonFinite


class TensorPrinter(Callback):
    """Log the values of ``names`` (model variables, or values the training step returns such as
    ``'cost'`` and ``add_moving_summary`` scalars) after every step.

    Example::

        TensorPrinter(['cost', 'accuracy'])
    """

    def __init__(self, names: Sequence[str]):
        if not isinstance(names, (list, tuple)):
            raise TypeError(f"TensorPrinter: names must be a list, got {names!r}")
        self._names = list(names)

    def steps_to_next_trigger(self) -> Optional[int]:
        return 1

    def _trigger_step(self):
        for n, v in zip(self._names, read_named_values(self.trainer, self._names, "TensorPrinter")):
            logger.info("%s: %s", n, v)


class SimpleMovingAverage(Callback):
    """Every ``window_size`` steps, put the mean of the last ``window_size`` values of each
    scalar in ``tensors`` into the monitors as ``<name>/SMA`` (a sliding-window average of
    step outputs such as ``'cost'`` or an ``add_moving_summary`` scalar).

    Example::

        SimpleMovingAverage(['cost'], window_size=100)
    """

    def __init__(self, tensors: Sequence[str], window_size: int):
        if isinstance(tensors, str):
            tensors = [tensors]
        self._names = list(tensors)
        self._display = [n[:-2] if n.endswith(":0") else n for n in self._names]
        self._window = int(window_size)
        if self._window < 1:
            raise ValueError(f"SimpleMovingAverage: window_size must be >= 1, got {window_size}")
        self._queue = deque(maxlen=self._window)

    def steps_to_next_trigger(self) -> Optional[int]:
        return 1

    def _trigger_step(self):
        values = read_named_values(self.trainer, self._names, "SimpleMovingAverage")
        for n, v in zip(self._display, values):
            if np.ndim(v) != 0:
                raise ValueError(f"SimpleMovingAverage takes scalars; '{n}' has shape {np.shape(v)}")
        self._queue.append([float(v) for v in values])
        if self.global_step % self._window == 0:
            for name, avg in zip(self._display, np.asarray(self._queue).mean(axis=0)):
                self.trainer.monitors.put_scalar(name + "/SMA", float(avg))
