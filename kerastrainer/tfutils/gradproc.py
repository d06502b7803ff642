"""Mirrors ``tensorpack.tfutils.gradproc``: gradient processors, on ``[(grad, var), ...]``.

``optimizer.apply_grad_processors(opt, [gradproc.GlobalNormClip(5), gradproc.ScaleGradient(
('.*/b', 2.))])`` (:mod:`kerastrainer.tfutils.optimizer`) returns an optimizer that runs the
processors on ``[(grad, var), ...]`` before each Keras update, as in tensorpack. Regexes match
the variables' tensorpack names (``'conv0/W'``, as in ``trainer.named_variables()``).

Example::

    def optimizer(self):
        opt = tf.keras.optimizers.SGD(0.1, momentum=0.9)   # or a tfv1.train optimizer
        return optimizer.apply_grad_processors(opt, [gradproc.GlobalNormClip(5.0)])
"""
from __future__ import annotations

import inspect
import re
from contextlib import contextmanager
from typing import Callable, Dict, List, Tuple

import tensorflow as tf

from .._internals import tf_variable_of
from ..utils import logger

__all__ = ["GradientProcessor", "FilterNoneGrad", "GlobalNormClip", "MapGradient", "SummaryGradient",
           "PrintGradient", "CheckGradient", "ScaleGradient"]

_current = {"names": {}}  # id(tf.Variable) -> tensorpack name, while an optimizer runs its processors


def variable_key(var) -> int:
    """The key of ``var`` in a name table of :func:`variable_names` (its underlying ``tf.Variable``)."""
    return id(tf_variable_of(var))


@contextmanager
def variable_names(table: Dict[int, str]):
    """Within the block, :func:`var_name` reads names from ``table`` (``{variable_key(v): name}``)."""
    prev, _current["names"] = _current["names"], table
    try:
        yield
    finally:
        _current["names"] = prev


def var_name(var) -> str:
    """The tensorpack-style name of a variable (``'conv0/W'``), else its TF name."""
    return _current["names"].get(variable_key(var)) or getattr(var, "path", None) or var.name.split(":")[0]


class GradientProcessor:
    """Base class: ``process([(grad, var), ...]) -> [(grad, var), ...]``; subclasses define ``_process``."""

    def process(self, grads: List[Tuple]) -> List[Tuple]:
        with tf.name_scope(type(self).__name__):
            return self._process(list(grads))

    def _process(self, grads):
        raise NotImplementedError


class FilterNoneGrad(GradientProcessor):
    """Drop the pairs whose gradient is None."""

    def __init__(self, verbose: bool = True):
        self._verbose = verbose

    def _process(self, grads):
        out = [(g, v) for g, v in grads if g is not None]
        if self._verbose and len(out) < len(grads):
            logger.warning("No gradient w.r.t. %d variable(s): %s", len(grads) - len(out),
                           ", ".join(var_name(v) for g, v in grads if g is None))
        return out


class GlobalNormClip(GradientProcessor):
    """Clip all gradients together by their global norm (``tf.clip_by_global_norm``)."""

    def __init__(self, global_norm: float):
        self._norm = float(global_norm)

    def _process(self, grads):
        gs, vs = zip(*grads) if grads else ((), ())
        clipped, _ = tf.clip_by_global_norm(list(gs), self._norm)
        return list(zip(clipped, vs))


class MapGradient(GradientProcessor):
    """Apply ``func(grad)`` or ``func(grad, var)`` to gradients of variables matching ``regex``;
    a None result drops the gradient (the variable is not updated)."""

    def __init__(self, func: Callable, regex: str = ".*"):
        nargs = len(inspect.signature(func).parameters)
        if nargs not in (1, 2):
            raise ValueError(f"MapGradient: func must take (grad) or (grad, var); it takes {nargs} arguments.")
        self.func = func if nargs == 2 else (lambda grad, var: func(grad))
        self.regex = regex if regex.endswith("$") else regex + "$"

    def _process(self, grads):
        out, matched = [], False
        for g, v in grads:
            if re.match(self.regex, var_name(v)):
                matched = True
                g = self.func(g, v)
                if g is None:
                    continue
            out.append((g, v))
        if not matched:
            logger.warning("[%s] No variable matches regex %s.", type(self).__name__, self.regex)
        return out


class ScaleGradient(MapGradient):
    """Multiply gradients of variables matching each regex: ``[('.*/b', 2.), ('conv0/.*', 0.)]``
    (0 freezes them)."""

    def __init__(self, multipliers, verbose: bool = True):
        if not isinstance(multipliers, list):
            multipliers = [multipliers]
        self.multipliers = [(r if r.endswith("$") else r + "$", float(m)) for r, m in multipliers]
        self._verbose = verbose
        self._logged = set()
        super().__init__(self._mapper)

    def _mapper(self, grad, var):
        name = var_name(var)
        for regex, m in self.multipliers:
            if re.match(regex, name):
                if self._verbose and name not in self._logged:
                    self._logged.add(name)
                    logger.info("Gradient of '%s' is multiplied by %s", name, m)
                return None if m == 0 else grad * m
        return grad


class CheckGradient(MapGradient):
    """Fail the step (``tf.debugging.check_numerics``) if a gradient holds NaN or Inf."""

    def __init__(self):
        super().__init__(lambda g, v: tf.debugging.check_numerics(g, f"CheckGradient/{var_name(v)}"))


class PrintGradient(MapGradient):
    """Print gradients of matching variables every step (``tf.print``)."""

    def __init__(self, regex: str = ".*"):
        def show(g, v):
            with tf.control_dependencies([tf.print("gradient of", var_name(v), g, summarize=5)]):
                return tf.identity(g)
        super().__init__(show, regex)


class SummaryGradient(MapGradient):
    """Accepted and warned about: tensorpack summarised gradients from inside the update, which
    kerastrainer's monitors do not see; gradients pass through unchanged."""

    def __init__(self, regex: str = ".*", collections=None):
        logger.warning("SummaryGradient: gradient summaries are not recorded in kerastrainer "
                       "(gradients exist only inside the update); the processor passes them through.")
        super().__init__(lambda g: g, regex)
