"""tensorpack's TF1 optimizer wrappers: ``ProxyOptimizer``, ``PostProcessOptimizer``,
``VariableAssignmentOptimizer``, with tensorpack's meaning.

Each is a ``tf.compat.v1.train.Optimizer`` that forwards to the optimizer it wraps: in a TF1 graph
(a custom trainer's, a ``tf.Graph``) it is used as is. ``PostProcessOptimizer(opt, func)`` runs
``func(v)`` for each updated variable after the update; ``VariableAssignmentOptimizer(opt, func)``
assigns ``func(v)`` (``None``: leave ``v``) after the update (WGAN's weight clipping).

Returned by ``ModelDesc.optimizer()``, the wrapped TF1 optimizer is translated to Keras 3 and the
post-processing runs after each Keras update (:class:`KerasPostProcess`), on the step's variables
(the TF variables under the model's Keras ones, named by their op names, as TF1 code reads them).

Example::

    def clip(v):
        return tf.clip_by_value(v, -0.01, 0.01) if v.op.name.startswith('discrim/') else None
    return VariableAssignmentOptimizer(tf.compat.v1.train.RMSPropOptimizer(1e-4), clip)
"""
from __future__ import annotations

from typing import Callable, Optional

import keras
import tensorflow as tf

from .._internals import give_tf1_op_name, optimizer_trainable_variables, tf_variable_of
from .keras_optimizer_wrapper import KerasOptimizerWrapper

__all__ = ["ProxyOptimizer", "PostProcessOptimizer", "VariableAssignmentOptimizer", "KerasPostProcess"]


class ProxyOptimizer(tf.compat.v1.train.Optimizer):
    """A ``tf.compat.v1.train.Optimizer`` forwarding everything to ``opt`` (tensorpack's base of wrappers).

    Example::

        class Logged(ProxyOptimizer):
            def apply_gradients(self, grads_and_vars, global_step=None, name=None):
                print(len(grads_and_vars))
                return super().apply_gradients(grads_and_vars, global_step, name)
    """

    def __init__(self, opt, name: str = "ProxyOptimizer"):
        if not isinstance(opt, tf.compat.v1.train.Optimizer):
            raise TypeError(f"{type(self).__name__} wraps a tf.compat.v1.train optimizer, got {type(opt).__name__} "
                            "(a Keras 3 optimizer: subclass it, or use apply_grad_processors).")
        super().__init__(False, name)
        self._opt = opt

    @property
    def wrapped(self):
        return self._opt

    def compute_gradients(self, *args, **kwargs):
        return self._opt.compute_gradients(*args, **kwargs)

    def get_slot(self, *args, **kwargs):
        return self._opt.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._opt.get_slot_names(*args, **kwargs)

    def variables(self):
        return self._opt.variables()

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        return self._opt.apply_gradients(grads_and_vars, global_step=global_step, name=name)

    def post_process(self, variable) -> Optional[object]:
        """What runs on ``variable`` after each update (None: nothing); see the subclasses."""
        return None


class PostProcessOptimizer(ProxyOptimizer):
    """Runs ``func(v)`` (an op, or None) on each updated variable after the update.

    Example::

        PostProcessOptimizer(opt, lambda v: tf.compat.v1.assign(v, tf.clip_by_norm(v, 1.0)).op)
    """

    def __init__(self, opt, func: Callable, colocate: bool = True):
        super().__init__(opt, "PostProcessOptimizer")
        self._func = func
        self._colocate = colocate   # TF2 places the op with its variable itself

    def post_process(self, variable):
        return self._func(variable)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        pairs = list(grads_and_vars)
        update = self._opt.apply_gradients(pairs, global_step=global_step, name=name)
        with tf.control_dependencies([update]):
            ops = [o for o in (self.post_process(v) for g, v in pairs if g is not None) if o is not None]
        return tf.group(update, *ops, name=name or "post_process")


class VariableAssignmentOptimizer(PostProcessOptimizer):
    """Assigns ``func(v)`` to each updated variable after the update (``None``: the variable is left).

    Example::

        VariableAssignmentOptimizer(opt, lambda v: tf.clip_by_value(v, -0.01, 0.01))
    """

    def __init__(self, opt, func: Callable):
        def assign(v):
            value = func(v)
            return None if value is None else tf.compat.v1.assign(v, value).op
        super().__init__(opt, assign)


class KerasPostProcess(KerasOptimizerWrapper):
    """A Keras 3 optimizer running a :class:`PostProcessOptimizer`'s ``post_process`` after each update of
    ``inner_optimizer`` (what ``ModelDesc.optimizer()`` returning one becomes).

    Example::

        KerasPostProcess(keras.optimizers.RMSprop(1e-4), VariableAssignmentOptimizer(tf1_opt, clip))
    """

    def __init__(self, inner_optimizer: keras.optimizers.Optimizer, wrapper: ProxyOptimizer,
                 names: Optional[Callable[[], dict]] = None, name: str = None):
        super().__init__(inner_optimizer, name or type(wrapper).__name__)
        self._wrapper = wrapper
        self._names = names   # () -> {name: variable}: what `v.op.name` answers in the user's function

    def build(self, var_list):
        if self.built:
            return
        self.inner_optimizer.build(var_list)
        super().build(var_list)
        if self._names is not None:
            name_of = {id(tf_variable_of(v)): n for n, v in self._names().items()}
            for v in var_list:
                tv = tf_variable_of(v)
                if id(tv) in name_of:
                    give_tf1_op_name(tv, tf.compat.v1.get_default_graph(), lambda n=name_of[id(tv)]: n)

    def apply(self, grads, trainable_variables=None):
        if trainable_variables is None:
            trainable_variables = optimizer_trainable_variables(self)
        pairs = [(g, v) for g, v in zip(grads, trainable_variables) if g is not None]
        self.inner_optimizer.apply_gradients(pairs)
        variables = [v for _, v in pairs]
        ctx = tf.distribute.get_replica_context()
        if ctx is None:
            self._post_process(None, variables)
        else:   # a mirrored variable is assigned in the cross-replica context (every copy alike)
            ctx.merge_call(self._post_process, args=(variables,))

    def _post_process(self, strategy, variables):
        for v in variables:
            self._wrapper.post_process(tf_variable_of(v))

    def finalize_variable_values(self, var_list):
        self.inner_optimizer.finalize_variable_values(var_list)
