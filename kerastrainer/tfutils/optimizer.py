"""Mirrors ``tensorpack.tfutils.optimizer``: ``apply_grad_processors`` and ``AccumGradOptimizer``.

``apply_grad_processors(opt, procs)`` wraps an optimizer (Keras, or a ``tfv1.train`` one that
``ModelDesc.optimizer()`` may return) with gradient processors (:mod:`kerastrainer.tfutils.gradproc`);
where ``ModelDesc.optimizer()`` is read, the wrapper becomes the Keras optimizer whose
``apply_gradients`` runs the processors first (:func:`install_processors`).

Example::

    def optimizer(self):
        opt = tf.keras.optimizers.SGD(0.1, momentum=0.9)
        return optimizer.apply_grad_processors(opt, [gradproc.GlobalNormClip(5.0)])
"""
from __future__ import annotations

from typing import Callable, Sequence

from ..utils.tf1_only import tf1_only_class
from .gradproc import GradientProcessor, variable_key, variable_names

__all__ = ["apply_grad_processors", "AccumGradOptimizer", "ProxyOptimizer", "PostProcessOptimizer",
           "VariableAssignmentOptimizer"]


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
            cache.update({variable_key(v): n for n, v in names().items()})
        with variable_names(cache):
            pairs = list(grads_and_vars)
            for p in procs:
                pairs = p.process(pairs)
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


# tensorpack's TF1 optimizer wrappers: subclasses of tf.train.Optimizer, which Keras 3 does not use
_WRAPPER = "a wrapper of a TF1 tf.train.Optimizer; Keras 3 optimizers are not TF1 optimizers"
ProxyOptimizer = tf1_only_class(
    "ProxyOptimizer", __name__, _WRAPPER,
    "Subclass the Keras optimizer instead (override apply_gradients / update_step), or transform "
    "the gradients with apply_grad_processors(opt, [gradproc...]).")
PostProcessOptimizer = tf1_only_class(
    "PostProcessOptimizer", __name__, _WRAPPER,
    "Run the post-update op in a Callback's _trigger_step (e.g. var.assign(...)) or use a Keras "
    "weight constraint (kernel_constraint=...), which Keras applies after each update.")
VariableAssignmentOptimizer = tf1_only_class(
    "VariableAssignmentOptimizer", __name__, _WRAPPER,
    "Give the layer a Keras constraint applied after every update: e.g. WGAN's clipping is "
    "kernel_constraint=lambda w: tf.clip_by_value(w, -0.01, 0.01).")
