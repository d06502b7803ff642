"""Step runners of the custom trainers, whose step is a TF1 graph (``tower_trainer.py``):

- :class:`TrainOpRunner`: ``k`` runs of ``train_op`` (with the main tower's moving summaries and
  its variable updates, as tensorpack's hooked session ran them) in one ``tf.function`` call;
- :class:`RunStepRunner`: the trainer's own ``run_step()``, once per call; each
  ``hooked_sess.run`` in it counts one global step, as tensorpack's hooked session did.

They implement :class:`~.step_runner.StepRunner` for the fit loop (``loop.py``), and leave the
graph (its construction, summaries and updates) to the trainer.

Example (what ``TowerTrainer`` does when training starts)::

    runner = TrainOpRunner(tf1_graph, train_op, update_ops, summaries, tensor_summaries, global_step)
    result = runner.run(k)
"""
from __future__ import annotations

from typing import Callable, Dict, List

import numpy as np
import tensorflow as tf

from .step_result import NO_STEP, PackedStats, StepResult
from .step_runner import StepRunner, steps_tensor
from .tf1_graph import TF1Graph

__all__ = ["TrainOpRunner", "RunStepRunner"]


class TrainOpRunner(StepRunner):
    """``k`` steps of a TF1 graph's ``train_op`` per call.

    Args:
        graph: the trainer's TF1 graph.
        train_op: the op (or tensor) one step runs.
        update_ops: variable updates run with every step (BatchNorm statistics, ``UPDATE_OPS``).
        summaries: scalar tensors by name (averaged over the call's steps).
        tensor_summaries: histogram and image tensors by name (the call's last step).
        global_step: the step variable, advanced in-graph every step.
    """

    def __init__(self, graph: TF1Graph, train_op, update_ops: List, summaries: Dict[str, tf.Tensor],
                 tensor_summaries: Dict[str, tf.Tensor], global_step: tf.Variable):
        self._graph = graph
        self._ops = [train_op] + list(update_ops)
        self._names = sorted(summaries)
        self._scalars = [summaries[n] for n in self._names]
        self._hist_names = sorted(tensor_summaries)
        self._hists = [tensor_summaries[n] for n in self._hist_names]
        self._global_step = global_step
        self.stats = PackedStats(self._names)
        self._function = None

    @property
    def traced(self) -> bool:
        return self._function is not None and self._function.experimental_get_tracing_count() > 0

    def _build(self):
        step = self._graph.function(self._ops + self._scalars + self._hists)
        n_ops, n_sc = len(self._ops), len(self._scalars)
        global_step, stats, hist_names = self._global_step, self.stats, self._hist_names

        def call(k):
            acc = [tf.constant(0.0) for _ in stats.names]
            first_bad = tf.constant(NO_STEP, tf.int64)
            # the last step's histograms and images, of any shape (as the standard train function)
            hist = [tf.compat.v1.placeholder_with_default(tf.zeros([0]), shape=None) for _ in hist_names]
            for i in tf.range(k):
                outs = step()
                global_step.assign_add(1)
                values = [tf.cast(v, tf.float32) for v in outs[n_ops:n_ops + n_sc]]
                acc = [a + v for a, v in zip(acc, values)]
                if values:
                    bad = tf.logical_not(tf.reduce_all(tf.math.is_finite(tf.stack(values))))
                    first_bad = tf.where(tf.logical_and(first_bad < 0, bad), tf.cast(i, tf.int64), first_bad)
                hist = [tf.cast(h, tf.float32) for h in outs[n_ops + n_sc:]]
            kf = tf.cast(k, tf.float32)
            return stats.encode([a / kf for a in acc], tf.constant(NO_STEP), first_bad), hist

        return tf.function(call)

    def run(self, k: int) -> StepResult:
        if self._function is None:
            self._function = self._build()
        packed, hist = self._function(steps_tensor(k))
        return self.stats.decode(packed, dict(zip(self._hist_names, hist)), steps=k)


class RunStepRunner(StepRunner):
    """A custom trainer's own ``run_step()``, one call per loop step.

    Args:
        run_step: the trainer's ``run_step``.
        hooked_runs: gives and clears the records of the hooked runs made since it was last
            called: ``[{'scalars': {...}, 'step': global step, 'hists': {...}}]``.
        global_step: gives the trainer's global step (the hooked session advances it per run).
    """

    fixed_steps_per_call = 1

    def __init__(self, run_step: Callable[[], None], hooked_runs: Callable[[], List[dict]],
                 global_step: Callable[[], int]):
        self._run_step = run_step
        self._hooked_runs = hooked_runs
        self._global_step = global_step

    def run(self, k: int) -> StepResult:
        start = self._global_step()
        self._hooked_runs()   # (runs made outside a step belong to no call)
        self._run_step()
        runs = self._hooked_runs()
        scalars: Dict[str, float] = {}
        for name in {n for r in runs for n in r["scalars"]}:
            scalars[name] = float(np.mean([r["scalars"][name] for r in runs if name in r["scalars"]]))
        bad = next((r["step"] - start for r in runs if not all(np.isfinite(v) for v in r["scalars"].values())),
                   NO_STEP)
        return StepResult(steps=k, global_steps=self._global_step() - start, scalars=scalars,
                          histograms=runs[-1]["hists"] if runs else {}, first_nonfinite=bad, timed=False)
