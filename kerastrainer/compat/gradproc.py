"""tensorpack's gradient processors and ``apply_grad_processors``, on Keras 3 optimizers.

``optimizer.apply_grad_processors(opt, [gradproc.GlobalNormClip(5), gradproc.ScaleGradient(
('.*/b', 2.))])`` returns an optimizer that runs the processors on ``[(grad, var), ...]``
before each update, as in tensorpack. Regexes match the variables' tensorpack names
(``'conv0/W'``, as in ``trainer.named_variables()``).

Example::

    def optimizer(self):
        opt = tfv1.train.MomentumOptimizer(0.1, 0.9)
        return optimizer.apply_grad_processors(opt, [gradproc.GlobalNormClip(5.0)])
"""
from __future__ import annotations

import inspect
import re
from typing import Callable, List, Sequence, Tuple

import tensorflow as tf

from .._internals import tf_variable_of
from ..utils import logger

__all__ = ["GradientProcessor", "FilterNoneGrad", "GlobalNormClip", "MapGradient", "ScaleGradient",
           "SummaryGradient", "CheckGradient", "PrintGradient", "apply_grad_processors",
           "GradientProcessedOptimizer", "AccumGradOptimizer"]

_current = {"names": {}}  # id(tf.Variable) -> tensorpack name, while an optimizer runs its processors


def _key(var) -> int:
    return id(tf_variable_of(var))


def var_name(var) -> str:
    """The tensorpack-style name of a variable (``'conv0/W'``), else its TF name."""
    return _current["names"].get(_key(var)) or getattr(var, "path", None) or var.name.split(":")[0]


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


class GradientProcessedOptimizer:
    """What :func:`apply_grad_processors` returns: an optimizer (TF1 or Keras) and processors;
    the trainer turns it into the Keras optimizer that runs the processors before each update."""

    def __init__(self, opt, procs: Sequence[GradientProcessor]):
        self.opt = opt
        self.procs = list(procs)


def apply_grad_processors(opt, gradprocs: Sequence[GradientProcessor]) -> GradientProcessedOptimizer:
    """An optimizer that runs ``gradprocs`` on ``[(grad, var), ...]`` before updating (tensorpack's)."""
    if not isinstance(gradprocs, (list, tuple)):
        raise TypeError(f"apply_grad_processors: gradprocs must be a list, got {type(gradprocs).__name__}.")
    for gp in gradprocs:
        if not isinstance(gp, GradientProcessor):
            raise TypeError(f"apply_grad_processors: {gp!r} is not a GradientProcessor.")
    if isinstance(opt, GradientProcessedOptimizer):
        return GradientProcessedOptimizer(opt.opt, opt.procs + list(gradprocs))
    return GradientProcessedOptimizer(opt, gradprocs)


def install_processors(kopt, procs: Sequence[GradientProcessor], names: Callable[[], dict]) -> None:
    """Make ``kopt.apply_gradients`` run ``procs`` first. ``names()`` gives ``{name: variable}``."""
    original = kopt.apply_gradients
    cache = {}

    def apply_gradients(grads_and_vars, *args, **kwargs):
        if not cache:
            cache.update({_key(v): n for n, v in names().items()})
        prev, _current["names"] = _current["names"], cache
        try:
            pairs = list(grads_and_vars)
            for p in procs:
                pairs = p.process(pairs)
        finally:
            _current["names"] = prev
        pairs = [(g, v) for g, v in pairs if g is not None]
        return original(pairs, *args, **kwargs)

    kopt.apply_gradients = apply_gradients


def AccumGradOptimizer(opt, niter: int):  # noqa: N802 - tensorpack's name, called like its class
    """tensorpack's gradient-accumulating optimizer wrapper: the name imports, a call raises.

    Programs import it at module level beside code that uses it only on request (tensorpack's
    ImageNet ``imagenet_utils.py`` uses it when ``accum_grad != 1``), so the name must exist.
    It is not translated: tensorpack applies the *sum* of ``niter`` steps' gradients through
    the TF1 optimizer, and no Keras 3 option reproduces that exactly; a call says what to use.
    """
    raise NotImplementedError(
        f"AccumGradOptimizer({type(opt).__name__}, {niter}) is not supported: give a Keras 3 "
        f"optimizer gradient_accumulation_steps={niter} instead (it applies the mean of the "
        f"accumulated gradients where tensorpack applied their sum: multiply the learning rate "
        f"by {niter} for tensorpack's update).")
