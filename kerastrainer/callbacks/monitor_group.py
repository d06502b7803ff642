"""The monitors' group and base class: :class:`Monitors` (where callbacks put statistics, and what
remembers them) and :class:`TrainingMonitor` (a destination). The destinations themselves, the
console table, ``stats.json`` and TensorBoard events, are in ``monitor.py``.

Example::

    monitors = Monitors([JSONWriter(), ScalarPrinter()])
    monitors.put_scalar('validation_error', 0.03)
    monitors.get_latest('validation_error')        # 0.03
"""
from __future__ import annotations

import numbers
from collections import defaultdict
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np

from ..utils import logger
from .base import Callback

__all__ = ["TrainingMonitor", "Monitors"]


_LR_NAMES = ("learning_rate", "lr")


class TrainingMonitor(Callback):
    """Base class of monitors: receives the statistics put into :class:`Monitors`.

    Override any of ``process_scalar(name, val)``, ``process_histogram(name, values)``,
    ``process_image(name, img)``, ``process_event(event)``, plus the usual callback
    hooks. A monitor belongs to one :class:`Monitors` group, which runs its hooks;
    do not also register it with the trainer.

    Example::

        class PrintCost(TrainingMonitor):
            def process_scalar(self, name, val):
                if name == 'cost':
                    print(self.global_step, val)
    """

    def process_scalar(self, name: str, val: float) -> None:
        pass

    def process_histogram(self, name: str, values: np.ndarray) -> None:
        pass

    def process_image(self, name: str, img: np.ndarray) -> None:
        """``img`` is a uint8 or float array of shape NHWC."""

    def process_event(self, event: Any) -> None:
        pass

    def _resolve_dir(self, given: Optional[str] = None) -> Optional[str]:
        """The directory to write to (``given`` or the log directory), or None with a warning."""
        d = given or logger.get_logger_dir()
        if d is None:
            logger.warn("%s: no log directory is set (logger.set_logger_dir); it will write nothing.",
                        self)
        return d


def _to_float(name: str, val) -> float:
    """A Python float from a number, numpy scalar, 0-d/1-element array or TF scalar tensor."""
    if isinstance(val, numbers.Real) and not isinstance(val, bool):
        return float(val)
    try:
        arr = np.asarray(val)
    except Exception as e:  # e.g. a symbolic tensor
        raise TypeError(f"put_scalar({name!r}): cannot read {type(val).__name__} as a number; "
                        "pass a Python/numpy number or an eager tensor.") from e
    if arr.size != 1 or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise ValueError(f"put_scalar({name!r}): expected a scalar number, got {type(val).__name__} "
                         f"of shape {arr.shape} and dtype {arr.dtype}.")
    return float(arr.reshape(()))


def _check_name(name) -> str:
    if not isinstance(name, str) or not name:
        raise TypeError(f"A statistic's name must be a non-empty string, got {name!r}.")
    return name


def _as_nhwc(name: str, img) -> np.ndarray:
    arr = np.asarray(img)
    if arr.ndim == 2:
        arr = arr[None, :, :, None]
    elif arr.ndim == 3:
        arr = arr[None]
    if arr.ndim != 4 or arr.shape[-1] not in (1, 3, 4):
        raise ValueError(f"put_image({name!r}): expected an image of shape HW, HWC or NHWC with 1, 3 "
                         f"or 4 channels, got shape {np.asarray(img).shape}.")
    return arr


class Monitors(Callback):
    """The group of monitors that statistics are put into; ``trainer.monitors``.

    It is a callback: register it with the trainer (after the other callbacks, so
    that statistics put at epoch end reach the epoch's outputs), and it runs the hooks
    of its members. On a non-chief worker, members with ``chief_only`` are left out;
    the group itself runs everywhere, so ``put_scalar`` and ``get_history`` always work.

    Args:
        monitors: the :class:`TrainingMonitor` s (None entries are ignored).
    """

    _chief_only = False

    def __init__(self, monitors: Iterable[Optional[TrainingMonitor]]):
        mons = [m for m in monitors if m is not None]
        for m in mons:
            if not isinstance(m, TrainingMonitor):
                raise TypeError(f"Monitors: {m!r} (type {type(m).__name__}) is not a TrainingMonitor.")
        self._all_monitors: List[TrainingMonitor] = mons
        self._monitors: List[TrainingMonitor] = list(mons)
        self._latest: Dict[str, float] = {}
        self._history: Dict[str, List[Tuple[int, float]]] = defaultdict(list)
        self._history_epochs: Dict[str, List[int]] = defaultdict(list)

    @property
    def monitors(self) -> List[TrainingMonitor]:
        """The members that run in this process."""
        return list(self._monitors)

    def _step_and_epoch(self) -> Tuple[int, int]:
        tr = self.trainer
        if tr is None:
            return 0, 0
        return int(tr.global_step), int(tr.epoch_num)

    # --- the callback hooks, forwarded to the members ---------------------------------------
    def _setup_graph(self):
        is_chief = self.trainer.is_chief
        self._monitors = [m for m in self._all_monitors if is_chief or not m.chief_only]
        for m in self._monitors:
            m.setup_graph(self.trainer)

    def _before_train(self):
        for m in self._monitors:
            m.before_train()

    def _before_epoch(self):
        for m in self._monitors:
            m.before_epoch()

    def _trigger_step(self):
        for m in self._monitors:
            m.trigger_step()

    def _after_epoch(self):
        for m in self._monitors:
            m.after_epoch()

    def _trigger_epoch(self):
        self._put_learning_rate()
        for m in self._monitors:
            m.trigger_epoch()

    def _put_learning_rate(self) -> None:
        """The optimizer's learning rate, each epoch, unless a HyperParamSetter already put it;
        with several optimizers (Objectives) each one's, as ``<objective>/learning_rate``."""
        epoch = self._step_and_epoch()[1]
        named = self.trainer.named_optimizers
        if named:
            stats = [(f"{n}/", o) for n, o in named.items()]
        else:
            stats = [("", self.trainer.optimizer)]
        for prefix, opt in stats:
            if any(prefix + name in self._latest and self._history_epochs[prefix + name][-1] == epoch
                   for name in _LR_NAMES):
                continue
            opt = getattr(opt, "inner_optimizer", opt)  # LossScaleOptimizer
            try:
                lr = np.asarray(opt.learning_rate)  # Keras evaluates a schedule at the current iteration
                if lr.dtype == np.float32:
                    lr = float(str(np.float32(lr)))  # the shortest decimal: 0.05, not 0.05000000074505806
                self.put_scalar(prefix + "learning_rate", lr)
            except (AttributeError, TypeError, ValueError):
                pass  # no optimizer, or a learning rate that is not one number

    def _trigger(self):
        for m in self._monitors:
            m.trigger()

    def _after_train(self):
        for m in self._monitors:
            m.after_train()

    # --- putting statistics --------------------------------------------------------------------
    def put_scalar(self, name: str, val) -> None:
        """Record a scalar (Python, numpy or eager TF number) at the current global step."""
        name = _check_name(name)
        val = _to_float(name, val)
        step, epoch = self._step_and_epoch()
        self._latest[name] = val
        self._history[name].append((step, val))
        self._history_epochs[name].append(epoch)
        for m in self._monitors:
            m.process_scalar(name, val)

    def put_histogram(self, name: str, values) -> None:
        """Record the distribution of ``values`` (any shape; TensorBoard shows a histogram)."""
        name = _check_name(name)
        arr = np.asarray(values)
        if arr.size == 0 or not np.issubdtype(arr.dtype, np.number):
            raise ValueError(f"put_histogram({name!r}): expected a non-empty numeric array, got "
                             f"shape {arr.shape} dtype {arr.dtype}.")
        for m in self._monitors:
            m.process_histogram(name, arr)

    def put_image(self, name: str, img) -> None:
        """Record an image: HW, HWC or NHWC, uint8 in [0, 255] or float in [0, 1]."""
        name = _check_name(name)
        arr = _as_nhwc(name, img)
        for m in self._monitors:
            m.process_image(name, arr)

    def put_event(self, event) -> None:
        """Hand a ``tf.compat.v1.Event`` (or ``Summary``) protobuf to the monitors."""
        for m in self._monitors:
            m.process_event(event)

    # --- reading them back ---------------------------------------------------------------------
    def get_latest(self, name: str) -> float:
        """The last value put for the scalar ``name``."""
        try:
            return self._latest[name]
        except KeyError:
            avail = ", ".join(sorted(self._latest)) or "none yet"
            raise KeyError(f"No statistic named {name!r} has been put into the monitors. "
                           f"Available: {avail}.") from None

    def get_history(self, name: str, per_epoch: bool = False) -> List[Tuple[int, float]]:
        """Every value put for ``name`` as ``(global_step, value)``, oldest first.

        With ``per_epoch=True``, only the last value put in each epoch.
        """
        self.get_latest(name)  # the clear KeyError
        hist = self._history[name]
        if not per_epoch:
            return list(hist)
        epochs = self._history_epochs[name]
        return [h for i, h in enumerate(hist) if i + 1 == len(hist) or epochs[i + 1] != epochs[i]]

    def scalar_names(self) -> List[str]:
        """Names of all scalars put so far."""
        return sorted(self._latest)
