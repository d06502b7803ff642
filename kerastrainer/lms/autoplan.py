"""``AutoPlanner``: the 'auto' policy of an :class:`~kerastrainer.lms.LMS`, from profile to plan.

Owns when and on what 'auto' plans: the scratch trace of a tower function or a
Keras model under a :class:`~kerastrainer.lms.planner.Profiler` (the blocks met
during it are measured, not run under a mode), the batch size it estimates with
(given, seen in the training trace, the trainer's or ``fit``'s, the input
signature's), the memory budget, the weights' bytes, the plan kept
(``plan``) and a plan left pending until the first training trace when the model is
not built or the batch is unknown at ``apply``.

It leaves the arithmetic (estimate, choice per block, the log of it) to
``planner.py``, which blocks are candidates to ``selection.py``, and running a
block under the plan's mode to ``runner.py``.

Example::

    auto = AutoPlanner(knobs, selection)
    auto.schedule_keras(kmodel)         # plans now when the model is built and the batch known
    auto.mode_for('dense_3')            # -> 'recompute', 'offload+recompute' or None
"""
from __future__ import annotations

import contextlib
import threading
from typing import Callable, Optional

import numpy as np
import tensorflow as tf

from ..utils import logger
from .offload import compute_device, same_device
from .planner import Plan, Profiler, device_memory_budget, plan

__all__ = ["AutoPlanner"]


class AutoPlanner:
    """Plans 'auto' for the models ``knobs`` is applied to; ``selection`` gives a Keras model's blocks."""

    def __init__(self, knobs, selection):
        self.knobs = knobs
        self.selection = selection
        self.plan: Optional[Plan] = None
        self.data_batch: Optional[int] = None   # the trainer's first batch, or fit's batch_size
        self._batch_seen: Optional[int] = None  # the batch of the training trace
        self._pending: Optional[Callable[[], None]] = None
        self._profiler: Optional[Profiler] = None
        self._profiling_thread = None
        self._lock = threading.RLock()

    # --- the scratch trace ---------------------------------------------------------------------
    def profiling_here(self) -> bool:
        """Whether this thread runs the scratch trace (its blocks are measured, not run under a mode)."""
        return self._profiling_thread == threading.get_ident()

    def profile_block(self, key, fn, args, kwargs):
        """Run block ``key`` plainly in the scratch trace and record the ops it made."""
        graph = tf.compat.v1.get_default_graph()
        n0 = len(graph.get_operations())
        out = fn(*args, **kwargs)
        inputs = [t for t in tf.nest.flatten(args) if isinstance(t, tf.Tensor)]
        self._profiler.record(key, graph.get_operations()[n0:], inputs)
        return out

    @contextlib.contextmanager
    def _profiling(self, profiler: Profiler):
        self._profiler, self._profiling_thread = profiler, threading.get_ident()
        try:
            yield profiler
        finally:
            self._profiler, self._profiling_thread = None, None

    # --- the batch size ------------------------------------------------------------------------
    def note_batch(self, tensors) -> None:
        """Remember the static batch size of a training trace's block input."""
        if self._batch_seen is not None:
            return
        for t in tf.nest.flatten(tensors):
            shape = getattr(t, "shape", None)
            if isinstance(t, tf.Tensor) and shape is not None and shape.rank and shape[0] is not None:
                self._batch_seen = int(shape[0])
                return

    def _known_batch(self, specs=()) -> Optional[int]:
        """The batch 'auto' estimates with: given, seen in the training trace, the trainer's, the specs'."""
        for b in (self.knobs.batch_size, self._batch_seen, self.data_batch):
            if b is not None:
                return int(b)
        for s in specs:
            if s.shape.rank and s.shape[0] is not None:
                return int(s.shape[0])
        return None

    def _batch_for(self, specs) -> int:
        b = self._known_batch(specs)
        if b is not None:
            return b
        logger.warning("LMS auto: the batch size is unknown (not given, not static in the training trace or "
                       "the input signature); estimating with batch 1, which likely finds nothing to do. "
                       "Give LMS(batch_size=...) for a real estimate.")
        return 1

    # --- when to plan --------------------------------------------------------------------------
    def schedule_tower(self, model, store) -> None:
        """Plan for ``model`` (a ModelDesc): now when built with a known batch, else at the first trace."""
        self._pending = lambda: self._plan_tower(model)
        # built and the batch known: plan now, so the log comes before training; else
        # at the first training trace, with the batch size it sees
        if not store.allow_create and self._known_batch(model.get_input_signature()) is not None:
            self.run_pending()

    def schedule_keras(self, kmodel) -> None:
        """Plan for Keras model ``kmodel``: now when built with a known batch, else at the first trace."""
        self._pending = lambda: self._plan_keras(kmodel)
        inputs = getattr(kmodel, "inputs", None) or []
        specs = [tf.TensorSpec(t.shape, t.dtype) for t in tf.nest.flatten(inputs)]
        if kmodel.built and self._known_batch(specs) is not None:
            self.run_pending()
        # else: planned at the first training trace, with the batch size it sees

    def run_pending(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, None
            if pending is not None:
                pending()

    def mode_for(self, key: str) -> Optional[str]:
        """The mode the plan gives block ``key`` (planning first if pending), or None."""
        if self._pending is not None:
            self.run_pending()
        return self.plan.modes.get(key) if self.plan is not None else None

    # --- profiling and deciding ----------------------------------------------------------------
    def _decide(self, profiler: Profiler, weight_bytes: int) -> Plan:
        if profiler.unknown:
            logger.warning("LMS auto: %d tensor sizes are unknown at trace time and were left out of "
                           "the estimate.", profiler.unknown)
        knobs = self.knobs
        budget = knobs.memory_budget if knobs.memory_budget is not None else device_memory_budget()
        can_offload = not same_device(compute_device(), knobs.host_device)
        chosen = plan(profiler.blocks, profiler.outside_bytes, weight_bytes, budget, can_offload,
                      keep_last=knobs.config.swapout_threshold)
        self.plan = chosen
        logger.info("%s", chosen.summary())
        if profiler.blocks:
            logger.info("LMS auto: %d block(s) profiled at batch size %s: %s", len(profiler.blocks),
                        profiler.batch_size, ", ".join(f"{b.key}={b.bytes / (1 << 20):.1f}MiB"
                                                       for b in profiler.blocks))
        else:
            logger.warning("LMS auto: the model has no block LMS may touch (mark them with lms_block, "
                           "or give blocks=).")
        return chosen

    @staticmethod
    def _weight_bytes(variables) -> int:
        # weights, their gradients and two optimizer slots (Adam): 4 copies
        return 4 * sum(int(np.prod(v.shape)) * tf.as_dtype(v.dtype).size for v in variables)

    def _plan_tower(self, model) -> None:
        specs = list(model.get_input_signature())
        batch = self._batch_for(specs)
        specs = [tf.TensorSpec([batch if (i == 0 and d is None) else d for i, d in
                                enumerate(s.shape.as_list())] if s.shape.rank else s.shape, s.dtype, s.name)
                 for s in specs]
        tower = model.get_tower_function()
        prof = Profiler(batch)

        def trace(*inputs):
            tower(*inputs, name="tower0", is_training=True, index=0, total=1)
            prof.record_graph(tf.compat.v1.get_default_graph())

        with self._profiling(prof):
            tf.function(trace, autograph=False).get_concrete_function(*specs)
        self._decide(prof, self._weight_bytes(model.layer_store.trainable_variables_list))

    def _plan_keras(self, kmodel) -> None:
        inputs = getattr(kmodel, "inputs", None)
        if not inputs:
            logger.warning("LMS auto: cannot profile a Keras model without symbolic inputs "
                           "(subclassed); recomputing every selected block.")
            self.plan = Plan({k: "recompute" for k, _ in self.selection.keras_blocks(kmodel)}, None, 0, 0, 0, 0,
                             0, True)
            return
        specs = [tf.TensorSpec(t.shape, t.dtype) for t in tf.nest.flatten(inputs)]
        batch = self._batch_for(specs)
        specs = [tf.TensorSpec([batch] + list(s.shape[1:]), s.dtype) for s in specs]
        prof = Profiler(batch)

        def trace(*xs):
            kmodel(list(xs) if len(xs) > 1 else xs[0], training=True)
            prof.record_graph(tf.compat.v1.get_default_graph())

        with self._profiling(prof):
            tf.function(trace, autograph=False).get_concrete_function(*specs)
        self._decide(prof, self._weight_bytes(kmodel.trainable_weights))
