"""``LMS``: large model support as a callback, or applied to a model directly.

Blocks are the unit: a tower function marks them with
:func:`~kerastrainer.lms.lms_block`; on a Keras model they are sub-layers, chosen
by name patterns (their ``call`` is wrapped). LMS decides per block, from
``policy`` (and for ``'auto'``, from estimated activation sizes and the memory
budget), whether the block is recomputed, offloaded to the host, both, or left
alone.

As a callback it must act before the train function is traced: the trainer calls
``_setup_graph`` of every callback after building the variables and before the
first train call, which is when the train ``tf.function`` is traced, so that is
where LMS installs itself. Variables are built by a trace without LMS (blocks run
plainly there), and reused by the LMS trace.

Example::

    lms = LMS(policy='recompute', blocks=['res*'])
    launch_train_with_config(TrainConfig(model=Model(), dataflow=df, callbacks=[lms]), SimpleTrainer())

    lms = LMS('auto', memory_budget='6GB')      # or, directly:
    lms.apply(keras_model)                      # wraps the call of matching sub-layers
"""
from __future__ import annotations

import contextlib
import fnmatch
import threading
from typing import Callable, Dict, List, Optional, Sequence, Union

import numpy as np
import tensorflow as tf

from ..callbacks.base import Callback
from ..utils import logger
from . import _state
from .offload import compute_device, same_device
from .planner import Plan, Profiler, device_memory_budget, parse_bytes, plan
from .recompute import MODES, BlockConfig, run_block

__all__ = ["LMS", "POLICIES"]

POLICIES = ("auto",) + MODES


def _keras():
    import keras
    return keras


class LMS(Callback):
    """Large model support: recompute or offload the activations of model blocks.

    Args:
        policy: ``'recompute'``, ``'offload'``, ``'offload+recompute'``, or ``'auto'``
            (estimate the activation bytes of each block and choose per block, so
            that the estimate fits ``memory_budget``; the choice is logged).
        blocks: which blocks LMS may touch: name patterns (``fnmatch``, e.g. ``'res*'``;
            a pattern also matches the blocks under it: ``'group0'`` matches
            ``'group0/block1'``), or Keras layers. None: every ``lms_block`` of a tower
            function; for a Keras model, every direct sub-layer that has sub-layers.
        swapout_threshold: offload only: the last ``n`` blocks (in forward order) keep
            their tensors on the device (their backward pass follows at once).
            -1: 1 (or the planner's choice for 'auto').
        swapin_ahead: offload only: a block's tensors start coming back when the
            backward pass reaches the block ``n`` positions after it. -1: 1.
        swapin_groupby: offload only: blocks are grouped ``n`` at a time and each
            group's tensors come back together. -1: 1.
        excl_blocks: patterns (or layers) never touched, even if ``blocks`` matches them.
        host_device: where offloaded tensors go.
        memory_budget: bytes (int) or a size such as ``'6GB'`` for ``'auto'``; None:
            the GPU's memory, or the host's available memory on a CPU-only machine.
        batch_size: the per-replica batch size 'auto' estimates with, when the model's
            input shapes leave it open (None: the input signature's, else 1 and a
            warning).

    Example::

        @lms_block('res2')
        def res2(x):
            ...
        LMS('recompute').apply(model_desc)       # or callbacks=[LMS('recompute')]
    """

    _chief_only = False  # every worker traces its own towers

    def __init__(self, policy: str = "auto", blocks: Optional[Sequence] = None,
                 swapout_threshold: int = -1, swapin_ahead: int = -1, swapin_groupby: int = -1,
                 excl_blocks: Sequence = (), host_device: str = "/cpu:0",
                 memory_budget: Union[int, str, None] = None, batch_size: Optional[int] = None):
        if policy not in POLICIES:
            raise ValueError(f"LMS policy must be one of {POLICIES}; got {policy!r}.")
        for n, v in (("swapout_threshold", swapout_threshold), ("swapin_ahead", swapin_ahead),
                     ("swapin_groupby", swapin_groupby)):
            if not isinstance(v, (int, np.integer)) or v < -1:
                raise ValueError(f"LMS {n} must be an int >= -1 (-1: automatic); got {v!r}.")
        if swapin_groupby == 0:
            raise ValueError("LMS swapin_groupby must be >= 1 (or -1).")
        if isinstance(blocks, (str, bytes)):
            blocks = [blocks]
        if isinstance(excl_blocks, (str, bytes)):
            excl_blocks = [excl_blocks]
        tf.DeviceSpec.from_string(host_device)  # fails early on a malformed device
        self.policy = policy
        self.blocks = None if blocks is None else list(blocks)
        self.excl_blocks = list(excl_blocks)
        self.host_device = host_device
        self.memory_budget = parse_bytes(memory_budget)
        self.batch_size = batch_size
        self.config = BlockConfig(host_device=host_device,
                                  swapin_ahead=1 if swapin_ahead < 0 else int(swapin_ahead),
                                  swapin_groupby=1 if swapin_groupby < 0 else int(swapin_groupby),
                                  swapout_threshold=1 if swapout_threshold < 0 else int(swapout_threshold))
        self.plan: Optional[Plan] = None
        self._plan_pending: Optional[Callable[[], None]] = None
        self._profiler: Optional[Profiler] = None
        self._profiling_thread = None
        self._lock = threading.RLock()
        self._wrapped_layers: List = []
        self._owners: List = []
        self.seen_blocks: Dict[str, str] = {}   # key -> mode used at the last trace

    # --- which blocks ------------------------------------------------------------------------
    @staticmethod
    def _matches(key: str, patterns: Sequence) -> bool:
        for p in patterns:
            if not isinstance(p, str):
                continue
            if fnmatch.fnmatchcase(key, p) or key.startswith(p.rstrip("/") + "/"):
                return True
        return False

    def selects(self, key: str) -> bool:
        """Whether block ``key`` is one LMS may touch (``blocks`` and ``excl_blocks``)."""
        if self._matches(key, self.excl_blocks):
            return False
        return self.blocks is None or self._matches(key, self.blocks)

    def mode_for(self, key: str) -> Optional[str]:
        """The mode of block ``key`` in the trace being built: a mode of ``MODES``, or None."""
        if not self.selects(key):
            return None
        if self._profiling_thread == threading.get_ident():
            return "profile"
        if self.policy != "auto":
            return self.policy
        if self._plan_pending is not None:
            self._run_pending_plan()
        return self.plan.modes.get(key) if self.plan is not None else None

    # --- running a block ---------------------------------------------------------------------
    def run_block(self, key: str, fn: Callable, args: tuple, kwargs: dict, mode: Optional[str] = None,
                  reenter: Optional[Callable] = None):
        """Run ``fn(*args, **kwargs)`` as block ``key`` (called by ``lms_block`` and wrapped layers)."""
        mode = self.mode_for(key) if mode is None else mode
        if mode is None:
            return fn(*args, **kwargs)
        if mode == "profile":
            return self._profile_block(key, fn, args, kwargs)
        if "offload" in mode and same_device(compute_device(), self.host_device) and \
                key not in self.seen_blocks:
            logger.warning("LMS: block '%s' is offloaded to %s, which is the compute device: "
                           "nothing moves. Set host_device to another device.", key, self.host_device)
        self.seen_blocks[key] = mode
        return run_block(key, fn, args, kwargs, mode, self.config, reenter=reenter)

    def _profile_block(self, key, fn, args, kwargs):
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

    # --- 'auto' ------------------------------------------------------------------------------
    def _run_pending_plan(self):
        with self._lock:
            pending, self._plan_pending = self._plan_pending, None
            if pending is not None:
                pending()

    def _decide(self, profiler: Profiler, weight_bytes: int) -> Plan:
        if profiler.unknown:
            logger.warning("LMS auto: %d tensor sizes are unknown at trace time and were left out of "
                           "the estimate.", profiler.unknown)
        budget = self.memory_budget if self.memory_budget is not None else device_memory_budget()
        can_offload = not same_device(compute_device(), self.host_device)
        chosen = plan(profiler.blocks, profiler.outside_bytes, weight_bytes, budget, can_offload,
                      keep_last=self.config.swapout_threshold)
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

    def _batch_for(self, specs) -> Optional[int]:
        if self.batch_size is not None:
            return int(self.batch_size)
        for s in specs:
            if s.shape.rank and s.shape[0] is not None:
                return int(s.shape[0])
        logger.warning("LMS auto: the batch size is not known from the input signature; estimating "
                       "with batch 1. Give LMS(batch_size=...) for a real estimate.")
        return 1

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
            self.plan = Plan({k: "recompute" for k, _ in self._keras_blocks(kmodel)}, None, 0, 0, 0, 0, 0,
                             True)
            return
        specs = [tf.TensorSpec(t.shape, t.dtype) for t in inputs]
        batch = self._batch_for(specs)
        specs = [tf.TensorSpec([batch] + list(s.shape[1:]), s.dtype) for s in specs]
        prof = Profiler(batch)

        def trace(*xs):
            kmodel(list(xs) if len(xs) > 1 else xs[0], training=True)
            prof.record_graph(tf.compat.v1.get_default_graph())

        with self._profiling(prof):
            tf.function(trace, autograph=False).get_concrete_function(*specs)
        self._decide(prof, self._weight_bytes(kmodel.trainable_weights))

    # --- installing --------------------------------------------------------------------------
    def apply(self, model):
        """Install LMS on ``model`` and return it.

        ``model``: a ``ModelDesc`` (its ``lms_block`` s), a ``LayerStore``, a
        ``keras.Model`` (its sub-layers' ``call`` is wrapped), or the adapter of
        ``KerasModel`` (its Keras model). Takes effect at the next trace of the
        training function.
        """
        keras = _keras()
        kmodel = getattr(model, "keras_model", None)
        if isinstance(model, keras.Model) or isinstance(kmodel, keras.Model):
            return self._apply_keras(model if isinstance(model, keras.Model) else kmodel) and model
        store = getattr(model, "layer_store", model)
        from ..tfutils.layer_store import LayerStore
        if not isinstance(store, LayerStore):
            raise TypeError(f"LMS.apply needs a ModelDesc, a LayerStore or a keras.Model; got "
                            f"{type(model).__name__}.")
        _state.activate(store, self)
        self._owners.append(store)
        if self.policy == "auto":
            if hasattr(model, "get_tower_function"):
                self._plan_pending = lambda: self._plan_tower(model)
                if not store.allow_create:  # built: plan now, so the log comes before training
                    self._run_pending_plan()
            else:
                logger.warning("LMS auto on a bare LayerStore cannot profile; recomputing every block.")
                self.policy = "recompute"
        return model

    def _keras_blocks(self, kmodel) -> List:
        keras = _keras()
        layers = [l for l in kmodel._flatten_layers(include_self=False, recursive=True)]
        if self.blocks is None:
            chosen = [l for l in kmodel._flatten_layers(include_self=False, recursive=False)
                      if any(True for _ in l._flatten_layers(include_self=False, recursive=False))]
            if not chosen:
                raise ValueError(f"LMS: Keras model '{kmodel.name}' has no sub-layer with sub-layers to "
                                 "use as a block; give blocks= (layer names, patterns or layers).")
        else:
            objs = [b for b in self.blocks if isinstance(b, keras.layers.Layer)]
            chosen = [l for l in layers if any(l is o for o in objs) or self._matches(l.name, self.blocks)]
            if not chosen:
                raise ValueError(f"LMS: no sub-layer of '{kmodel.name}' matches blocks={self.blocks}; "
                                 f"its layers are {[l.name for l in layers][:20]}.")
        excl = [b for b in self.excl_blocks if isinstance(b, keras.layers.Layer)]
        return [(l.name, l) for l in chosen
                if not any(l is e for e in excl) and not self._matches(l.name, self.excl_blocks)]

    def _apply_keras(self, kmodel) -> bool:
        from .blocks import current_block_key, _inside
        for key, layer in self._keras_blocks(kmodel):
            if getattr(layer, "_lms_original_call", None) is not None:
                raise ValueError(f"LMS: layer '{key}' is already wrapped by an LMS; call remove() on "
                                 "that one first.")
            orig = layer.call
            lms = self

            def call(*args, _orig=orig, _key=key, **kwargs):
                training = kwargs.get("training", None)
                flat = tf.nest.flatten(args)
                if training is False or current_block_key() is not None or \
                        not any(isinstance(t, tf.Tensor) for t in flat):
                    return _orig(*args, **kwargs)
                mode = lms.mode_for(_key)
                if mode is None:
                    return _orig(*args, **kwargs)
                with _inside(_key):
                    return lms.run_block(_key, _orig, args, kwargs, mode=mode,
                                         reenter=lambda: _inside(_key))

            object.__setattr__(layer, "call", call)
            object.__setattr__(layer, "_lms_original_call", orig)
            self._wrapped_layers.append(layer)
        if self.policy == "auto":
            self._plan_pending = lambda: self._plan_keras(kmodel)
            if kmodel.built:
                self._run_pending_plan()
        logger.info("LMS (%s) on Keras model '%s': blocks %s", self.policy, kmodel.name,
                    [l.name for l in self._wrapped_layers])
        return True

    def remove(self) -> None:
        """Undo :meth:`apply`: unwrap Keras layers and deactivate on tower stores."""
        for layer in self._wrapped_layers:
            object.__setattr__(layer, "call", layer._lms_original_call)
            object.__setattr__(layer, "_lms_original_call", None)
        self._wrapped_layers = []
        for owner in self._owners:
            if _state.active_lms(owner) is self:
                _state.deactivate(owner)
        self._owners = []

    # --- the callback ------------------------------------------------------------------------
    def _setup_graph(self):
        fn = getattr(self.trainer, "_train_fn", None)
        traced = getattr(fn, "experimental_get_tracing_count", lambda: 0)()
        if traced:
            raise RuntimeError("LMS was set up after the train function was traced; it cannot change "
                               "it any more. Give LMS in TrainConfig(callbacks=[...]) (or call "
                               "lms.apply(model) before training).")
        self.apply(self.trainer.model)

    def _after_train(self):
        self.remove()

    def __str__(self):
        return f"LMS({self.policy})"
