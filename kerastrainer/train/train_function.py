"""The train function: one ``tf.function`` that runs ``k`` training steps of every replica.

It owns what a step computes: the tower's cost on the replica's batch (pulled in-graph from
the InputSource), the gradients (the loss scaled by ``1 / replicas`` when averaging, and by
the loss-scale optimizer under fp16), the update, the statistics (moving summaries summed over
the replicas: only the main tower records them; histograms of the main tower's last step), and
the non-finite check (the first step of the call whose cost or gradients were NaN/Inf). It is
a pure builder: everything it reads is in a :class:`StepSpec`. It leaves to the trainer the
strategy, the variables and the optimizer (made in ``setup_graph``), to the XLA policy the
region, and to the step runner (``step_runner.py``) running the function.

Example (what ``FunctionStepRunner`` does)::

    fn, stats = build_train_function(spec)
    packed, histograms = fn(tf.constant(k), *feeds)
    result = stats.decode(packed, histograms, steps=k)     # a StepResult
"""
from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import keras
import tensorflow as tf

from .._internals import with_keras_random_state
from ..tfutils.tower import TowerTensorHandle
from ..utils.devices import current_replica_index
from .step_result import PackedStats

__all__ = ["build_train_function", "StepSpec", "NONFINITE_GRADS"]


# a per-replica output of the step: 1.0 where a gradient holds NaN or Inf
NONFINITE_GRADS = "_nonfinite_grads"


class _DeferredUpdates(keras.StatelessScope):
    """Keras-variable updates made in the scope are recorded, not applied: ``updates`` maps
    ``id(variable)`` to ``(variable, new value)``; reads in the scope see the new values."""

    def __init__(self):
        super().__init__()
        self.updates: Dict[int, tuple] = {}

    def add_update(self, update):
        variable, value = update
        self.updates[id(variable)] = (variable, value)
        super().add_update(update)


@dataclass(frozen=True)
class StepSpec:
    """Everything a train function is built from.

    Attributes:
        strategy: the replicas' ``tf.distribute`` strategy (variables made in its scope).
        num_replicas: replicas of the sync group (Horovod: processes), for the loss scale.
        objectives: the resolved objectives (``objectives.py``): optimizers and their variables.
        tower: the tower function (``TowerFunction``), built.
        source: the InputSource, set up.
        average: average the replicas' gradients (scale each loss by ``1 / num_replicas``).
        global_step: the step variable, advanced in-graph every step.
        reduce_gradients: the trainer's own reduction of a replica's gradients (Horovod), or None.
        xla_region: ``'step'``, ``'forward_backward'`` or None.
        fetch_names: scalar tensors named in the tower that callbacks asked for (``ProgressBar``):
            the main tower's, reported as ``'_fetch:<name>'``, their mean over the call's steps.
    """

    strategy: tf.distribute.Strategy
    num_replicas: int
    objectives: Sequence
    tower: object
    source: object
    average: bool
    global_step: tf.Variable
    reduce_gradients: Optional[Callable[[List], List]] = None
    xla_region: Optional[str] = None
    fetch_names: Tuple[str, ...] = ()


def fetch_key(name: str) -> str:
    """The step output under which the tower tensor ``name`` asked for by a callback is reported."""
    return "_fetch:" + name


def _tower_scalar(ctx, inputs, costs, name: str, signature):
    """The scalar tensor ``name`` of the tower just traced in ``ctx``, as float32."""
    try:
        t = TowerTensorHandle(ctx, inputs, costs, signature).get_tensor(name)
    except KeyError as e:
        raise ValueError(f"A callback (ProgressBar) asked for the tower tensor '{name}' each step: "
                         f"{e.args[0]}") from None
    if t.shape.rank not in (0, None):
        raise ValueError(f"The tower tensor '{name}' asked for each step (ProgressBar) has shape {t.shape}; "
                         f"only scalars are reported: name a scalar, e.g. tf.reduce_mean(x, name='{name}').")
    return tf.cast(tf.reshape(t, []), tf.float32)


def build_train_function(spec: StepSpec) -> Tuple[tf.types.experimental.PolymorphicFunction, PackedStats]:
    """The multi-step train function ``fn(k, *feeds) -> (packed, histograms)`` and its output layout."""
    strategy = spec.strategy
    num_replicas = spec.num_replicas
    objectives = spec.objectives
    tower = spec.tower
    source = spec.source
    reduce_gradients = spec.reduce_gradients or (lambda grads: grads)
    summary_names = list(tower.summary_names)
    # The trainer reports the returned cost as 'cost'. A moving summary the tower itself
    # names 'cost' (tensorpack programs often add_moving_summary the cost they return) is
    # reported under that name instead, as in tensorpack; the trainer's own then goes under
    # '_cost' (hidden from the monitors, still checked for NaN). Several costs (objectives):
    # each under its key, alike.
    cost_names = [None] if tower.cost_names is None else list(tower.cost_names)
    cost_keys = {c: ("_" if (c or "cost") in summary_names else "") + (c or "cost") for c in cost_names}
    histogram_names = list(tower.histogram_names)
    scale = 1.0 / num_replicas if spec.average else 1.0
    # XLA region: never the input's dequeue (queue and iterator ops have no XLA kernel);
    # the update too where it has no all-reduce (XlaPolicy.choose_region)
    region = spec.xla_region
    # A strategy synchronises an update of a mirrored variable (BatchNorm statistics) with
    # a merge_call, which cannot run inside a nested function: with XLA on the tower only,
    # its Keras-variable updates are collected in the cluster and applied after it.
    defer = region == "forward_backward"

    def make_pass(pass_objectives):
        """One forward pass of one replica's tower and the updates of ``pass_objectives`` from it."""
        deferred: Dict[int, list] = {}  # replica -> the Keras variables its tower updates

        def forward_backward(*inputs):
            rid = current_replica_index()
            updates = _DeferredUpdates() if defer else contextlib.nullcontext()
            with tf.GradientTape(persistent=len(pass_objectives) > 1) as tape, updates:
                costs, ctx = tower(*inputs, name=f"tower{rid}", is_training=True, index=rid, total=num_replicas)
                costs = {None: costs} if tower.cost_names is None else costs
                costs32 = {c: tf.cast(costs[c], tf.float32) for c in cost_names}
                losses = []
                for o in pass_objectives:
                    loss = costs32[o.cost] * scale
                    losses.append(o.optimizer.scale_loss(loss) if o.loss_scaled else loss)
            grads = [tape.gradient(loss, o.variables) for loss, o in zip(losses, pass_objectives)]
            del tape
            # NaN/Inf in the input can leave the cost finite (max(NaN, 0) is 0 on some kernels) and
            # still poison the gradients: the non-finite check looks at both
            finite = [tf.reduce_all(tf.math.is_finite(g)) for gs in grads for g in gs if g is not None]
            outs = {cost_keys[c]: costs32[c] for c in cost_names}
            for n in spec.fetch_names:   # the main tower's, as summaries; the others add zeros
                outs[fetch_key(n)] = _tower_scalar(ctx, inputs, costs, n, tower.input_signature) if rid == 0 \
                    else tf.constant(0.0)
            outs[NONFINITE_GRADS] = 1.0 - tf.cast(tf.reduce_all(finite) if finite else True, tf.float32)
            for n in summary_names:
                # only the main tower records summaries; the others add zeros to the sum
                outs[n] = tf.cast(ctx.moving_summaries[n], tf.float32) if n in ctx.moving_summaries \
                    else tf.constant(0.0)
            hists = {n: ctx.tensor_summaries.get(n, tf.zeros([0])) for n in histogram_names}
            new_values = []
            if defer:
                deferred[rid] = [v for v, _ in updates.updates.values()]
                new_values = [value for _, value in updates.updates.values()]
            return grads, outs, hists, new_values

        def update(grads_per_objective):
            for o, grads in zip(pass_objectives, grads_per_objective):
                pairs = [(g, v) for g, v in zip(reduce_gradients(list(grads)), o.variables)
                         if g is not None]
                if not pairs:
                    raise ValueError("No gradient flows from the cost to any trainable variable." if o.implicit
                                     else f"Objective '{o.name}': no gradient flows from cost '{o.cost}' to any "
                                          "of its variables.")
                o.optimizer.apply_gradients(pairs)

        if region == "forward_backward":
            forward_backward = tf.function(forward_backward, jit_compile=True)

        def run_pass(*inputs):
            grads, outs, hists, new_values = forward_backward(*inputs)
            for v, value in zip(deferred.get(current_replica_index(), []), new_values):
                v.assign(value)
            update(grads)
            return outs, hists

        return run_pass

    def make_whole_step(due: Tuple[int, ...]):
        """One step of one replica, updating the objectives of indices ``due``: first the extra
        updates of objectives with ``repeat > 1`` (each from a pass of its own, in order), then
        one pass for every due objective, whose statistics are the step's."""
        due_objectives = [objectives[i] for i in due if objectives[i].applied]
        extra_passes = [make_pass([o]) for o in due_objectives for _ in range(o.repeat - 1)]
        main_pass = make_pass(due_objectives)

        def whole_step(*inputs):
            for extra in extra_passes:   # (its updates come before the next pass's reads: TF orders them)
                extra(*inputs)
            return main_pass(*inputs)

        if region == "step":
            whole_step = tf.function(whole_step, jit_compile=True)

        def replica_step(*feeds):
            inputs = list(feeds) if source.requires_feed else source.get_input_tensors(*feeds)
            return whole_step(*inputs)

        return replica_step

    mean, total = tf.distribute.ReduceOp.MEAN, tf.distribute.ReduceOp.SUM
    # a tower that updates itself (a Keras train_step) returns running statistics (Keras metrics'
    # results): a call reports its last step's, not their mean
    latest = not any(o.applied for o in objectives)
    acc_names = list(cost_keys.values()) + summary_names + [fetch_key(n) for n in spec.fetch_names]
    mean_names = set(cost_keys.values())

    def one_step(replica_step, feeds):
        """Run one step on every replica; its reduced outputs, non-finite flags and histograms."""
        # Keras keeps its random-seed state per thread, and replicas trace in threads of their own
        per_replica, per_replica_hist = strategy.run(with_keras_random_state(replica_step), args=feeds)
        step = {n: strategy.reduce(mean if n in mean_names else total, per_replica[n], axis=None)
                for n in acc_names}
        hist = {n: strategy.experimental_local_results(per_replica_hist[n])[0] for n in histogram_names}
        bad = tf.logical_not(tf.reduce_all([tf.math.is_finite(step[k]) for k in mean_names]))
        bad_grads = strategy.reduce(total, per_replica[NONFINITE_GRADS], axis=None) > 0
        return step, hist, bad, bad_grads

    # objectives updated every n-th step: the steps of one period, grouped by what they update
    period = math.lcm(*[o.every for o in objectives])
    due_at = [tuple(i for i, o in enumerate(objectives) if r % o.every == 0) for r in range(period)]
    due_sets = sorted(set(due_at), key=due_at.index)
    replica_steps = [make_whole_step(d) for d in due_sets]
    branch_of_residue = tf.constant([due_sets.index(d) for d in due_at], tf.int32)

    global_step = spec.global_step
    stats = PackedStats(acc_names)

    def train_calls(k, *feeds):
        acc = {n: tf.constant(0.0) for n in acc_names}
        first_bad = tf.constant(-1, tf.int64)
        first_bad_grads = tf.constant(-1, tf.int64)
        # histograms (vectors) and images (NHWC) of the call's last step, from the main
        # tower (replica 0); an empty value of unknown shape, so the loop may change it
        hist = {n: tf.compat.v1.placeholder_with_default(tf.zeros([0]), shape=None)
                for n in histogram_names}
        for i in tf.range(k):
            if len(replica_steps) == 1:
                step, hist, bad, bad_grads = one_step(replica_steps[0], feeds)
            else:
                residue = tf.cast(tf.math.floormod(tf.cast(global_step, tf.int64), period), tf.int32)
                step, hist, bad, bad_grads = tf.switch_case(
                    tf.gather(branch_of_residue, residue),
                    [functools.partial(one_step, fn, feeds) for fn in replica_steps])
            global_step.assign_add(1)
            acc = {n: step[n] if latest else acc[n] + step[n] for n in acc}
            first_bad = tf.where(tf.logical_and(first_bad < 0, tf.logical_or(bad, bad_grads)),
                                 tf.cast(i, tf.int64), first_bad)
            first_bad_grads = tf.where(tf.logical_and(first_bad_grads < 0, bad_grads), tf.cast(i, tf.int64),
                                       first_bad_grads)
        kf = tf.constant(1.0) if latest else tf.cast(k, tf.float32)
        # one vector, so the host fetches the call's outputs in one transfer
        return stats.encode([acc[n] / kf for n in acc_names], first_bad_grads, first_bad), hist

    return tf.function(train_calls), stats
