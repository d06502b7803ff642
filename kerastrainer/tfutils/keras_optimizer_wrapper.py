"""A Keras 3 optimizer that wraps another and updates through it (tensorpack's optimizer wrappers
made Keras optimizers: ``AccumGradOptimizer``, a ``PostProcessOptimizer`` from ``optimizer()``).

The wrapper answers for the wrapped optimizer where a callback or checkpoint looks: its
``variables`` are its own and the wrapped one's, its ``learning_rate`` and ``iterations`` are the
wrapped one's (a schedule sets the rate that updates). What a wrapper does around the update is
its subclass's (:mod:`.accum_grad`, :mod:`.proxy_optimizer`).

Example::

    class Clipped(KerasOptimizerWrapper):
        def apply(self, grads, trainable_variables=None):
            self.inner_optimizer.apply([tf.clip_by_norm(g, 1.0) for g in grads], trainable_variables)
"""
from __future__ import annotations

import keras

__all__ = ["KerasOptimizerWrapper"]


class KerasOptimizerWrapper(keras.optimizers.Optimizer):
    """A Keras optimizer updating through ``inner_optimizer`` (see the module doc)."""

    def __init__(self, inner_optimizer: keras.optimizers.Optimizer, name: str):
        super().__init__(learning_rate=0.0, name=name)
        self.inner_optimizer = inner_optimizer

    @property
    def variables(self):
        return self._variables + self.inner_optimizer.variables

    @property
    def learning_rate(self):
        return self.inner_optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, learning_rate):
        self.inner_optimizer.learning_rate = learning_rate

    @property
    def iterations(self):
        """The wrapped optimizer's: the number of applying steps."""
        return self.inner_optimizer.iterations
