"""Hyper-parameter setters: change the learning rate (or any variable) during training.

A :class:`HyperParam` is something that can be read and set (a variable of the
trainer, or a Python attribute); a :class:`HyperParamSetter` is the callback that
decides its value. Setters run on every worker (``chief_only = False``), set the
value in ``before_train`` for the point where training (re)starts, and log each change.

Example::

    callbacks = [
        # 0.1 for epochs 1-30, 0.01 for 31-60, 0.001 after
        ScheduledHyperParamSetter('learning_rate', [(0, 0.1), (30, 0.01), (60, 0.001)]),
        # warm up linearly over the first 1000 steps
        ScheduledHyperParamSetter('learning_rate', [(0, 0.0), (1000, 0.1)],
                                  interp='linear', step_based=True),
    ]
"""
from __future__ import annotations

import math
import os
import operator
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..utils import logger
from .base import Callback
from ..utils.casting import whole_number

__all__ = ["HyperParam", "GraphVarParam", "ObjAttrParam", "HyperParamSetter",
           "ScheduledHyperParamSetter", "HyperParamSetterWithFunc", "StatMonitorParamSetter", "HumanHyperParamSetter"]


class HyperParam:
    """Something a :class:`HyperParamSetter` reads and sets.

    Subclasses implement ``set_value(v)`` and ``get_value()``, and may use
    ``setup_graph(trainer)`` to find what they set.

    Example::

        class DropRate(HyperParam):
            _readable_name = 'drop_rate'
            def __init__(self, layer):
                self.layer = layer
            def set_value(self, v):
                self.layer.rate = v
            def get_value(self):
                return self.layer.rate
    """

    def setup_graph(self, trainer) -> None:
        pass

    def set_value(self, v) -> None:
        raise NotImplementedError

    def get_value(self):
        raise NotImplementedError

    @property
    def readable_name(self) -> str:
        return getattr(self, "_readable_name", type(self).__name__)


class GraphVarParam(HyperParam):
    """A variable of the trainer, found by ``trainer.get_hyperparam_var(name)``.

    ``'learning_rate'`` (or ``'lr'``) is the optimizer's learning rate; other names
    are variables of the model.

    Example::

        ScheduledHyperParamSetter(GraphVarParam('learning_rate'), [(0, 1e-3), (10, 1e-4)])
    """

    def __init__(self, name: str, shape: Sequence[int] = ()):
        if not isinstance(name, str) or not name:
            raise TypeError(f"GraphVarParam: name must be a non-empty string, got {name!r}.")
        self.name = name.split(":")[0]  # accept tensorpack-style 'learning_rate:0'
        self.shape = tuple(shape)
        self._readable_name = self.name
        self.var = None

    def setup_graph(self, trainer) -> None:
        var = trainer.get_hyperparam_var(self.name)
        if var is None or not hasattr(var, "assign"):
            raise ValueError(f"GraphVarParam('{self.name}'): trainer.get_hyperparam_var returned {var!r}, "
                             "not a variable with .assign().")
        if self.shape and tuple(var.shape) != self.shape:   # (tensorpack's argument, now checked)
            raise ValueError(f"GraphVarParam('{self.name}', shape={self.shape}): the variable has shape "
                             f"{tuple(var.shape)}.")
        self.var = var

    def _check_setup(self):
        if self.var is None:
            raise RuntimeError(f"GraphVarParam('{self.name}') is used before setup_graph(trainer).")

    def set_value(self, v) -> None:
        self._check_setup()
        self.var.assign(v)

    def get_value(self):
        self._check_setup()
        val = self.var.numpy()
        return val.item() if getattr(val, "ndim", 1) == 0 else val


class ObjAttrParam(HyperParam):
    """A Python attribute of an object, e.g. a data augmentation strength.

    Example::

        ScheduledHyperParamSetter(ObjAttrParam(augmentor, 'max_angle'), [(0, 5), (10, 15)])
    """

    def __init__(self, obj: Any, attrname: str, readable_name: Optional[str] = None):
        if not hasattr(obj, attrname):
            raise AttributeError(f"ObjAttrParam: {type(obj).__name__} object has no attribute {attrname!r}.")
        self.obj = obj
        self.attrname = attrname
        self._readable_name = readable_name or attrname

    def set_value(self, v) -> None:
        setattr(self.obj, self.attrname, v)

    def get_value(self):
        return getattr(self.obj, self.attrname)


def _same(a, b) -> bool:
    try:
        return a is not None and b is not None and bool(a == b)
    except Exception:  # arrays etc.
        return False


class HyperParamSetter(Callback):
    """Base class of the callbacks that set a hyper-parameter.

    Subclasses implement ``_get_value_to_set()``: the value to set now, or None to
    leave it. It is asked in ``before_train`` (so a resumed run gets the value for
    its starting point), at each epoch end, and, where the subclass says so, after
    train calls. The value is set only when it differs from the last one set.

    Args:
        param: a :class:`HyperParam`, or a variable name (a :class:`GraphVarParam`).

    Example::

        class WarmRestart(HyperParamSetter):
            def _get_value_to_set(self):      # 0.1 at the start of every 10 epochs
                return 0.1 if self.trainer.epoch_num % 10 == 0 else None
    """

    _chief_only = False

    def __init__(self, param: Union[HyperParam, str]):
        if isinstance(param, str):
            param = GraphVarParam(param)
        if not isinstance(param, HyperParam):
            raise TypeError(f"{type(self).__name__}: param must be a HyperParam or a variable name, "
                            f"got {type(param).__name__}.")
        self.param = param
        self._last_value = None

    def _setup_graph(self):
        self.param.setup_graph(self.trainer)

    def get_current_value(self):
        """The parameter's current value."""
        return self.param.get_value()

    def _get_value_to_set(self):
        raise NotImplementedError

    def _value_for_before_train(self):
        """The value to set before training; by default what ``_get_value_to_set`` says."""
        return self._get_value_to_set()

    def _set(self, v, when: str, quiet: bool = False) -> None:
        if v is None or _same(v, self._last_value):
            return
        old = None
        try:
            old = self.get_current_value()
        except Exception:
            pass
        self.param.set_value(v)
        self._last_value = v
        if not _same(old, v):
            (logger.debug if quiet else logger.info)("[%s] %s: %s -> %s (%s).", type(self).__name__, self.param.readable_name,
                        _fmt(old), _fmt(v), when)

    def _before_train(self):
        self._set(self._value_for_before_train(), f"before training, at global step {self.global_step}")

    def trigger_epoch(self) -> None:
        # the value the ending epoch trained with goes to stats.json, TensorBoard and the
        # epoch table, before a subclass sets the next epoch's value
        self._record()
        super().trigger_epoch()

    def _record(self) -> None:
        monitors = self.trainer.monitors
        if monitors is None:
            return
        try:
            v = self.get_current_value()
            if isinstance(v, float) and _as_float32(v) == v:  # read from a float32 variable
                v = float(str(np.float32(v)))  # its shortest decimal: 0.1, not 0.10000000149
            monitors.put_scalar(self.param.readable_name, v)
        except (TypeError, ValueError, RuntimeError):
            pass  # not a scalar number (e.g. a vector parameter): nothing to plot

    def _trigger(self):
        self._set(self._get_value_to_set(), f"after epoch {self.epoch_num}")


def _as_float32(v):
    try:
        return float(np.float32(v))
    except (TypeError, ValueError):
        return None


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


class ScheduledHyperParamSetter(HyperParamSetter):
    """Set a hyper-parameter from a schedule of ``(point, value)`` pairs (tensorpack semantics).

    ``(e, v)`` sets the value to ``v`` after epoch ``e`` is done (``e = 0``: before the
    first epoch); with ``step_based=True`` after global step ``e``. Between points,
    the value is left alone; with ``interp='linear'`` it moves linearly from one point's
    value to the next. Before training (a resumed run starting mid-schedule), the value
    the schedule gives at the starting point is compared with the parameter's: if they
    differ, a warning names both and, with ``set_at_beginning=True`` (the default, as in
    tensorpack), the schedule's value is set.

    With ``step_based=True`` the trainer is asked to end a train call at each change
    point; while interpolating, about 100 times per segment.

    Args:
        param: a :class:`HyperParam` or a variable name (e.g. ``'learning_rate'``).
        schedule: ``[(point, value), ...]``; points are non-negative integers.
        interp: None or ``'linear'``.
        step_based: points are global steps instead of epochs.
        set_at_beginning: before training, set the value the schedule gives at the
            starting point even when that point is not one of the schedule's.

    Example::

        ScheduledHyperParamSetter('learning_rate', [(0, 0.1), (30, 0.01), (60, 0.001)])
    """

    # when interpolating step-based, set the value about this many times per segment
    _UPDATES_PER_SEGMENT = 100

    def __init__(self, param: Union[HyperParam, str], schedule: Sequence[Tuple[int, float]],
                 interp: Optional[str] = None, step_based: bool = False, set_at_beginning: bool = True):
        super().__init__(param)
        self.set_at_beginning = bool(set_at_beginning)
        self.schedule = self._check_schedule(schedule)
        if interp not in (None, "linear"):
            raise ValueError(f"ScheduledHyperParamSetter: interp must be None or 'linear', got {interp!r}.")
        self.interp = interp
        self.step_based = bool(step_based)

    @staticmethod
    def _check_schedule(schedule) -> List[Tuple[int, float]]:
        try:
            pairs = [tuple(p) for p in schedule]
        except TypeError:
            raise TypeError(f"ScheduledHyperParamSetter: schedule must be a list of (point, value) pairs, "
                            f"got {schedule!r}.") from None
        out = []
        for p in pairs:
            if len(p) != 2:
                raise ValueError(f"ScheduledHyperParamSetter: schedule entry {p!r} is not a (point, value) pair.")
            point, value = p
            if isinstance(point, float) and point.is_integer():
                point = int(point)
            if isinstance(point, bool) or not isinstance(point, int) or point < 0:
                raise ValueError(f"ScheduledHyperParamSetter: schedule point {point!r} must be a "
                                 "non-negative integer (an epoch, or a step with step_based=True).")
            out.append((point, float(value)))
        if not out:
            raise ValueError("ScheduledHyperParamSetter: the schedule is empty.")
        out.sort(key=operator.itemgetter(0))
        for (a, _), (b, _) in zip(out, out[1:]):
            if a == b:
                raise ValueError(f"ScheduledHyperParamSetter: schedule point {a} appears twice.")
        return out

    def _point(self, before_train: bool = False) -> int:
        if self.step_based:
            return int(self.trainer.global_step)
        if before_train:
            # the epochs already done: independent of how the trainer numbers epoch_num before training
            return int(self.trainer.starting_epoch) - 1
        return int(self.trainer.epoch_num)

    def _interp(self, p: int) -> Optional[float]:
        """The interpolated value strictly inside a segment, else None."""
        prev = None
        for e, v in self.schedule:
            if e > p:
                if prev is None:
                    return None
                pe, pv = prev
                return (p - pe) * 1.0 / (e - pe) * (v - pv) + pv
            prev = (e, v)
        return None

    def _value_at(self, p: int, exact_only: bool) -> Optional[float]:
        for e, v in self.schedule:
            if e == p:
                return v
        if self.interp == "linear":
            v = self._interp(p)
            if v is not None:
                return v
        if exact_only:
            return None
        # the last point already passed (a resumed run between change points)
        last = None
        for e, v in self.schedule:
            if e <= p:
                last = v
        return last

    def _get_value_to_set(self):
        return self._value_at(self._point(), exact_only=True)

    def _value_for_before_train(self):
        return self._value_at(self._point(before_train=True), exact_only=True)

    def _before_train(self):
        super()._before_train()
        self._check_value_at_beginning()

    def _check_value_at_beginning(self) -> None:
        p = self._point(before_train=True)
        v = self._value_at(p, exact_only=False)
        if v is None:
            return
        try:
            actual = float(self.get_current_value())
        except (TypeError, ValueError, RuntimeError):
            return
        if math.isclose(v, actual, rel_tol=1e-5, abs_tol=1e-8):
            return
        where = f"global step {p}" if self.step_based else f"epoch {p}"
        logger.warning("[ScheduledHyperParamSetter] By its schedule, '%s' should be %s at %s (where this "
                       "run starts), but it is %s.%s", self.param.readable_name, _fmt(v), where, _fmt(actual),
                       " Setting it to the schedule's value." if self.set_at_beginning else
                       " Left as it is (set_at_beginning=False); check how the parameter was initialized.")
        if self.set_at_beginning:
            self.param.set_value(v)
            self._last_value = v

    def _trigger_epoch(self):
        if not self.step_based:
            self.trigger()

    def _trigger_step(self):
        if self.step_based:
            gs = int(self.global_step)
            # interpolated updates happen ~100 times per segment: log only the schedule's points
            on_point = any(e == gs for e, _ in self.schedule)
            self._set(self._get_value_to_set(), f"after global step {gs}", quiet=not on_point)

    def steps_to_next_trigger(self) -> Optional[int]:
        if not self.step_based:
            return None
        gs = int(self.trainer.global_step)
        for i, (e, _) in enumerate(self.schedule):
            if e > gs:
                if self.interp == "linear" and i > 0:
                    pe = self.schedule[i - 1][0]
                    every = max((e - pe) // self._UPDATES_PER_SEGMENT, 1)
                    return min(e - gs, every - (gs - pe) % every)
                return e - gs
        return None


class HyperParamSetterWithFunc(HyperParamSetter):
    """Set a hyper-parameter to ``func(epoch_num, old_value)`` at each epoch end.

    ``epoch_num`` is the epoch just finished (``starting_epoch - 1`` before
    training); returning None or the old value changes nothing.

    Example::

        # halve the learning rate every 10 epochs
        HyperParamSetterWithFunc('learning_rate',
                                 lambda e, x: x * 0.5 if e > 0 and e % 10 == 0 else x)
    """

    def __init__(self, param: Union[HyperParam, str], func: Callable[[int, Any], Any]):
        super().__init__(param)
        if not callable(func):
            raise TypeError(f"HyperParamSetterWithFunc: func must be callable, got {func!r}.")
        self.f = func

    def _get_value_to_set(self):
        return self.f(int(self.trainer.epoch_num), self.get_current_value())

    def _value_for_before_train(self):
        return self.f(int(self.trainer.starting_epoch) - 1, self.get_current_value())


class StatMonitorParamSetter(HyperParamSetter):
    """Change a hyper-parameter when a statistic stopped improving.

    At each epoch end, take the per-epoch values of ``stat_name`` of the last
    ``last_k + 1`` epochs (``trainer.monitors.get_history(stat, per_epoch=True)``).
    If none of the last ``last_k`` is below the first minus ``threshold`` (above it
    plus ``threshold`` with ``reverse=True``), set the parameter to
    ``value_func(old_value)``. After a change, wait at least ``last_k`` epochs
    before the next one.

    Put this callback after the one that produces the statistic (e.g. an
    ``InferenceRunner``), so that it sees the value of the epoch that just ended.

    Example::

        # divide the learning rate by 5 when the validation error did not drop by 0.01 in 5 epochs
        StatMonitorParamSetter('learning_rate', 'validation_error', lambda x: x * 0.2,
                               threshold=0.01, last_k=5)
    """

    def __init__(self, param: Union[HyperParam, str], stat_name: str, value_func: Callable[[Any], Any],
                 threshold: float, last_k: int, reverse: bool = False):
        super().__init__(param)
        if not callable(value_func):
            raise TypeError(f"StatMonitorParamSetter: value_func must be callable, got {value_func!r}.")
        last_k = whole_number(last_k, "StatMonitorParamSetter(last_k=...)", minimum=1)
        self.stat_name = stat_name
        self.value_func = value_func
        self.threshold = float(threshold)
        self.last_k = last_k
        self.reverse = bool(reverse)
        self.last_changed_epoch = None
        self._warned_missing = False

    def _value_for_before_train(self):
        return None

    def _get_value_to_set(self):
        epoch = int(self.trainer.epoch_num)
        if self.last_changed_epoch is not None and epoch - self.last_changed_epoch < self.last_k:
            return None
        try:
            hist = self.trainer.monitors.get_history(self.stat_name, per_epoch=True)
        except KeyError as e:
            if not self._warned_missing:
                self._warned_missing = True
                logger.warn("[StatMonitorParamSetter] %s", e.args[0] if e.args else e)
            return None
        if len(hist) < self.last_k + 1:
            return None
        values = [v for _, v in hist[-self.last_k - 1:]]
        first = values[0]
        if any(math.isnan(v) for v in values):
            return None
        if not self.reverse:
            if min(values[1:]) < first - self.threshold:
                return None
        elif max(values[1:]) > first + self.threshold:
            return None
        self.last_changed_epoch = epoch
        logger.info("[StatMonitorParamSetter] %s did not %s by %g in the last %d epochs: %s",
                    self.stat_name, "increase" if self.reverse else "decrease", self.threshold,
                    self.last_k, ", ".join(f"{v:.5g}" for v in values))
        return self.value_func(self.get_current_value())


class HumanHyperParamSetter(HyperParamSetter):
    """Set a hyper-parameter from a file you edit while training runs: at each trigger (epoch
    end), ``file_name`` (in the logger directory) is read; a line ``<name>:<value>`` (e.g.
    ``learning_rate:1e-4``) sets the parameter. A missing file or line changes nothing (the
    latter is warned about).

    Example::

        callbacks=[HumanHyperParamSetter('learning_rate')]
        # then: echo "learning_rate:1e-4" > train_log/<run>/hyper.txt
    """

    def __init__(self, param: Union[HyperParam, str], file_name: str = "hyper.txt"):
        super().__init__(param)
        log_dir = logger.get_logger_dir()
        self.file_name = os.path.join(log_dir, file_name) if log_dir else file_name
        logger.info("Use %s to set the hyper-parameter '%s'.", self.file_name, self.param.readable_name)

    def _get_value_to_set(self):
        if not os.path.isfile(self.file_name):
            return None
        values = {}
        with open(self.file_name) as f:
            for line in f:
                if ":" in line:
                    k, v = line.strip().split(":", 1)
                    values[k.strip()] = v.strip()
        name = self.param.readable_name
        if name not in values:
            logger.warning("HumanHyperParamSetter: no line '%s:<value>' in %s", name, self.file_name)
            return None
        try:
            return float(values[name])
        except ValueError:
            logger.warning("HumanHyperParamSetter: '%s:%s' in %s is not a number", name, values[name], self.file_name)
            return None
