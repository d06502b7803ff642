"""Mirrors ``tensorpack.tfutils.optimizer``: ``apply_grad_processors`` and ``AccumGradOptimizer`` (its
own module, :mod:`.accum_grad`).

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

from .accum_grad import AccumGradOptimizer, PendingAccumGrad
from .proxy_optimizer import PostProcessOptimizer, ProxyOptimizer, VariableAssignmentOptimizer
from .gradproc import GradientProcessor, variable_key, variable_names

__all__ = ["apply_grad_processors", "AccumGradOptimizer", "ProxyOptimizer", "PostProcessOptimizer",
           "VariableAssignmentOptimizer"]


class GradientProcessedOptimizer:
    """What :func:`apply_grad_processors` returns: an optimizer (TF1 or Keras) and processors;
    the trainer turns it into the Keras optimizer that runs the processors before each update."""

    def __init__(self, opt, procs: Sequence[GradientProcessor]):
        self.opt = opt
        self.procs = list(procs)

    # tensorpack's wrapper is itself a tf.train.Optimizer: a custom trainer's TF1 graph (InfoGAN's
    # GANTrainer) calls opt.minimize(loss, var_list=...) on it, the processors running in apply_gradients
    def _tf1_optimizer(self, method: str):
        import tensorflow as tf
        if not isinstance(self.opt, tf.compat.v1.train.Optimizer):
            raise TypeError(f"apply_grad_processors({type(self.opt).__name__}, ...).{method}(): only a wrapped TF1 "
                            "tf.train optimizer has TF1's minimize/compute_gradients/apply_gradients; a Keras "
                            "optimizer is wrapped for ModelDesc.optimizer() (the trainer runs the processors).")
        return self.opt

    def compute_gradients(self, *args, **kwargs):
        """TF1's ``compute_gradients`` of the wrapped optimizer."""
        return self._tf1_optimizer("compute_gradients").compute_gradients(*args, **kwargs)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """The processors on ``[(grad, var)]``, then TF1's ``apply_gradients`` of the wrapped optimizer."""
        opt = self._tf1_optimizer("apply_gradients")
        pairs = list(grads_and_vars)
        names = {}
        for _, v in pairs:
            try:
                names[variable_key(v)] = v.op.name   # a custom trainer's variables answer their store name
            except AttributeError:
                pass
        with variable_names(names):
            for p in self.procs:
                pairs = p.process(pairs)
        return opt.apply_gradients(pairs, global_step=global_step, name=name)

    def minimize(self, loss, global_step=None, var_list=None, gate_gradients=1, aggregation_method=None,
                 colocate_gradients_with_ops=False, name=None, grad_loss=None):
        """TF1's ``minimize``: ``compute_gradients`` then this wrapper's ``apply_gradients``."""
        grads_and_vars = self.compute_gradients(
            loss, var_list=var_list, gate_gradients=gate_gradients, aggregation_method=aggregation_method,
            colocate_gradients_with_ops=colocate_gradients_with_ops, grad_loss=grad_loss)
        if not [v for g, v in grads_and_vars if g is not None]:
            raise ValueError(f"No gradients provided for any variable of {loss!r}; check the graph for ops without "
                             f"gradients between the loss and the variables {[v.name for _, v in grads_and_vars]}.")
        return self.apply_gradients(grads_and_vars, global_step=global_step, name=name)


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


def innermost_optimizer(opt):
    """The optimizer inside the wrappers of this module (``apply_grad_processors``, ``AccumGradOptimizer``
    of a TF1 optimizer, ``ProxyOptimizer`` and its subclasses)."""
    while isinstance(opt, (GradientProcessedOptimizer, PendingAccumGrad, ProxyOptimizer)):
        opt = opt.wrapped if isinstance(opt, ProxyOptimizer) else opt.opt
    return opt


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
