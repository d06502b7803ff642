"""tensorpack's ``AccumGradOptimizer``: gradients summed over ``niter`` steps, applied every ``niter``-th.

tensorpack's rule, kept exactly: every step adds the (replica-averaged) gradients into one
accumulator per variable and counts the step; on the steps where the count is a multiple of
``niter`` the wrapped optimizer applies the accumulated **sum** (not the mean: the update of a
``niter`` times larger batch at a ``niter`` times larger learning rate) and the accumulators are
cleared. On the other steps neither the variables nor the wrapped optimizer's state (momentum
slots, Adam's moments, its ``iterations``) change.

Two spellings, as tensorpack programs write them:

- ``AccumGradOptimizer(keras_optimizer, k)``: a Keras 3 optimizer, usable wherever one is;
- ``AccumGradOptimizer(tf.compat.v1.train.MomentumOptimizer(...), k)`` in ``ModelDesc.optimizer()``:
  a :class:`PendingAccumGrad` the optimizer reader turns into the Keras wrapper around the
  translated optimizer; in a custom trainer's TF1 graph it is a TF1 optimizer
  (``minimize`` / ``apply_gradients`` build tensorpack's accumulate-then-apply ops).

Example::

    def optimizer(self):
        opt = tf.compat.v1.train.MomentumOptimizer(self.lr, 0.9)
        return AccumGradOptimizer(opt, 8)
"""
from __future__ import annotations

import numbers

import keras
import tensorflow as tf

from .._internals import optimizer_trainable_variables, optimizer_variable_index
from .keras_optimizer_wrapper import KerasOptimizerWrapper

__all__ = ["AccumGradOptimizer", "KerasAccumGrad", "PendingAccumGrad"]


def _check_niter(niter) -> int:
    if isinstance(niter, bool) or not isinstance(niter, numbers.Integral):
        raise TypeError(f"AccumGradOptimizer: niter must be an int, got {niter!r}.")
    niter = int(niter)
    if niter < 1:
        raise ValueError(f"AccumGradOptimizer: niter must be >= 1, got {niter}.")
    return niter


class KerasAccumGrad(KerasOptimizerWrapper):
    """A Keras 3 optimizer applying ``inner_optimizer`` to the sum of every ``niter`` steps' gradients.

    Works in a ``tf.distribute`` step (the gradients are summed over the replicas first, as Keras
    does, then accumulated; the wrapped optimizer's update runs in a cross-replica branch, where
    a strategy allows a condition around its synchronisation) and outside any strategy.

    Example::

        opt = KerasAccumGrad(keras.optimizers.SGD(0.1, momentum=0.9), niter=4)
    """

    def __init__(self, inner_optimizer: keras.optimizers.Optimizer, niter: int, name: str = None):
        if not isinstance(inner_optimizer, keras.optimizers.Optimizer):
            raise TypeError(f"KerasAccumGrad wraps a Keras optimizer, got {type(inner_optimizer).__name__}.")
        super().__init__(inner_optimizer, name or "AccumGradOptimizer")
        self.niter = _check_niter(niter)

    def build(self, var_list):
        if self.built:
            return
        var_list = list(var_list)
        self._accumulators = [self.add_variable_from_reference(v, name="accum_grad") for v in var_list]
        self.counter = self.add_variable(shape=(), dtype="int64", initializer="zeros", aggregation="none",
                                         name="accum_counter")
        self.inner_optimizer.build(var_list)
        super().build(var_list)

    def apply(self, grads, trainable_variables=None):
        if trainable_variables is None:
            trainable_variables = optimizer_trainable_variables(self)
        pairs = [(g, v) for g, v in zip(grads, trainable_variables) if g is not None]
        if not self.built:
            with tf.init_scope():
                self.build([v for _, v in pairs])
        if not pairs:
            return
        grads = [g for g, _ in pairs]
        tvars = [v for _, v in pairs]
        accs = [self._accumulators[optimizer_variable_index(self, v)] for v in tvars]
        ctx = tf.distribute.get_replica_context()
        if ctx is None:
            raise ValueError("AccumGradOptimizer.apply() must be called in a replica context "
                             "(inside strategy.run, or outside any strategy).")
        # the replicas' sum (the trainer scaled each loss by 1 / replicas: their mean), as the
        # wrapped optimizer would take it; the condition then runs in the cross-replica context
        grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
        reduced = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads) if ctx.num_replicas_in_sync > 1 else grads
        ctx.merge_call(self._accumulate_and_maybe_apply, args=(reduced, tvars, accs))

    def _accumulate_and_maybe_apply(self, strategy, grads, tvars, accs):
        ext = strategy.extended
        for acc, g in zip(accs, grads):
            ext.update(acc.value, lambda a, x: a.assign_add(tf.cast(x, a.dtype)), args=(g,), group=False)
        ext.update(self.counter.value, lambda c: c.assign_add(1), group=False)
        due = tf.equal(tf.math.floormod(self.counter.value.read_value(), self.niter), 0)

        def apply_accumulated():
            ext.call_for_each_replica(self._apply_in_replica, args=(tvars, accs))
            for acc in accs:
                ext.update(acc.value, lambda a: a.assign(tf.zeros_like(a)), group=False)
            return tf.constant(True)

        tf.cond(due, apply_accumulated, lambda: tf.constant(False))

    def _apply_in_replica(self, tvars, accs):
        ctx = tf.distribute.get_replica_context()
        values = [acc.value.read_value() for acc in accs]
        if ctx is not None and ctx.num_replicas_in_sync > 1:
            # the wrapped optimizer sums what the replicas give it: one replica gives the sum, the others 0
            first = tf.equal(ctx.replica_id_in_sync_group, 0)
            values = [tf.where(first, x, tf.zeros_like(x)) for x in values]
        self.inner_optimizer.apply_gradients(list(zip(values, tvars)))

    def finalize_variable_values(self, var_list):
        self.inner_optimizer.finalize_variable_values(var_list)

    def get_config(self):
        return {"name": self.name, "niter": self.niter,
                "inner_optimizer": keras.optimizers.serialize(self.inner_optimizer)}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        inner = keras.optimizers.deserialize(config.pop("inner_optimizer"), custom_objects=custom_objects)
        return cls(inner, **config)


class PendingAccumGrad:
    """``AccumGradOptimizer`` of a TF1 ``tf.compat.v1.train`` optimizer (or of one wrapped by
    ``apply_grad_processors``): where ``ModelDesc.optimizer()`` is read, the wrapped optimizer is
    translated to Keras 3 and put in a :class:`KerasAccumGrad`; in a custom trainer's TF1 graph
    its ``minimize`` / ``apply_gradients`` build tensorpack's ops (accumulators, a counter, the
    wrapped optimizer's update under a ``tf.cond``).

    Example::

        opt = AccumGradOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), 4)
        train_op = opt.minimize(cost)          # in a TF1 graph
    """

    def __init__(self, opt, niter: int):
        self.opt = opt
        self.niter = _check_niter(niter)

    def _tf1(self, method: str):
        inner = self.opt
        if not hasattr(inner, "apply_gradients") or isinstance(inner, keras.optimizers.Optimizer):
            raise TypeError(f"AccumGradOptimizer({type(inner).__name__}, {self.niter}).{method}(): only a "
                            "wrapped TF1 tf.train optimizer has TF1's minimize/apply_gradients.")
        return inner

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's ``compute_gradients``."""
        return self._tf1("compute_gradients").compute_gradients(*args, **kwargs)

    def get_slot_names(self):
        return list(self._tf1("get_slot_names").get_slot_names()) + ["accum_grad"]

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Accumulate ``grads_and_vars``; every ``niter``-th call apply the sums (TF1 graph ops)."""
        inner = self._tf1("apply_gradients")
        v1 = tf.compat.v1
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        with v1.control_dependencies(None):
            accs = [v1.Variable(tf.zeros(v.shape, v.dtype.base_dtype), trainable=False,
                                name=v.op.name.replace("/", "_") + "/accum_grad") for _, v in pairs]
            counter = v1.Variable(0, trainable=False, dtype=tf.int32, name="AccumGrad/counter")
        with tf.name_scope("AccumGradOptimizer"):
            adds = [a.assign_add(tf.convert_to_tensor(g)) for a, (g, _) in zip(accs, pairs)]
            count = counter.assign_add(1)
            with tf.control_dependencies(adds + [count]):
                due = tf.equal(tf.math.floormod(counter.read_value(), self.niter), 0)

            def apply_sums():
                update = inner.apply_gradients([(a.read_value(), v) for a, (_, v) in zip(accs, pairs)])
                with tf.control_dependencies([update]):
                    clears = [a.assign(tf.zeros_like(a)) for a in accs]
                with tf.control_dependencies(clears):
                    return tf.constant(True)

            with tf.control_dependencies(adds + [count]):
                op = tf.cond(due, apply_sums, lambda: tf.constant(False))
            if global_step is not None:
                with tf.control_dependencies([op]):
                    return v1.assign_add(global_step, 1, name=name).op
            return tf.group(op, name=name or "cond_update_grad")

    def minimize(self, loss, global_step=None, var_list=None, name=None, **kwargs):
        """TF1's ``minimize``: the wrapped optimizer's gradients, accumulated (see ``apply_gradients``)."""
        grads_and_vars = self.compute_gradients(loss, var_list=var_list, **kwargs)
        return self.apply_gradients(grads_and_vars, global_step=global_step, name=name)


def AccumGradOptimizer(opt, niter: int):  # noqa: N802 - tensorpack's name, called like its class
    """tensorpack's gradient-accumulating optimizer (see the module's docstring).

    ``opt`` a Keras 3 optimizer: a :class:`KerasAccumGrad`. A TF1 optimizer (or one from
    ``apply_grad_processors``): a :class:`PendingAccumGrad` for ``ModelDesc.optimizer()`` or a
    custom trainer's TF1 graph.
    """
    if isinstance(opt, keras.optimizers.Optimizer):
        return KerasAccumGrad(opt, niter)
    if isinstance(opt, PendingAccumGrad) or hasattr(opt, "apply_gradients"):
        return PendingAccumGrad(opt, niter)
    raise TypeError(f"AccumGradOptimizer: {type(opt).__name__} is not an optimizer (give a Keras 3 optimizer or a "
                    "tf.compat.v1.train one).")
