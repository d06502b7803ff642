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
import dataclasses
import fnmatch
import threading
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Union

import keras
import numpy as np
import tensorflow as tf

from .._internals import layer_draws_random, sublayers
from ..callbacks.base import Callback
from ..utils import logger
from . import _state
from .offload import compute_device, same_device
from .planner import Plan, Profiler, device_memory_budget, parse_bytes, plan
from .recompute import MODES, BlockConfig, run_block
from .tflms import as_name_set, check_known, run_error_message, warn_unsupported

__all__ = ["LMS", "LMSKerasCallback", "LMSSessionRunHook", "POLICIES"]

POLICIES = ("auto",) + MODES
_KerasCallbackBase = keras.callbacks.Callback

_SCOPE_PROPS = ("excl_output_by_scopes", "excl_input_by_scopes", "incl_output_by_scopes",
                "incl_input_by_scopes")
_TYPE_PROPS = ("excl_output_by_types", "excl_input_by_types", "incl_output_by_types",
               "incl_input_by_types")


def _keras():
    return keras


def _is_name_collection(v) -> bool:
    return isinstance(v, (set, frozenset, list, tuple)) and all(isinstance(x, str) for x in v)


class LMS(Callback, _KerasCallbackBase):
    """Large model support: recompute or offload the activations of model blocks.

    Args:
        policy: ``'recompute'``, ``'offload'``, ``'offload+recompute'``, or ``'auto'``
            (estimate the activation bytes of each block and choose per block, so
            that the estimate fits ``memory_budget``; the choice is logged).
            None (default): as TFLMS, ``'offload'`` when ``swapout_threshold``,
            ``swapin_ahead`` and ``swapin_groupby`` are all given (>= 0), else ``'auto'``.
        blocks: which blocks LMS may touch: name patterns (``fnmatch``, e.g. ``'res*'``;
            a pattern also matches the blocks under it: ``'group0'`` matches
            ``'group0/block1'``), or Keras layers. None: every ``lms_block`` of a tower
            function; for a Keras model, every direct sub-layer that has sub-layers,
            or every layer of a flat model.
        swapout_threshold: a block's tensors are swapped (or recomputed) only when
            more than ``n`` blocks, itself included, run their backward pass before
            it needs them: the last ``n`` blocks keep their tensors on the device.
            TFLMS counted topological levels of the graph; here it counts blocks.
            -1: 1 (or the planner's choice for 'auto').
        swapin_ahead: a block's tensors start coming back when the backward pass
            reaches the block ``n`` positions after it. -1: 1.
        swapin_groupby: blocks are grouped ``n`` at a time and each group's tensors
            come back together. 0 (TFLMS: no grouping) and -1: 1.
        excl_blocks: patterns (or layers) never touched, even if ``blocks`` matches them.
        host_device: where offloaded tensors go (TFLMS's ``cpu_device``); default ``'/cpu:0'``.
        memory_budget: bytes (int) or a size such as ``'6GB'`` for ``'auto'``; None:
            the GPU's memory, or the host's available memory on a CPU-only machine.
        batch_size: the per-replica batch size 'auto' estimates with; None: the batch
            the training trace sees, else the trainer's first batch, else the input
            signature's, else 1 with a warning.
        sync_mode: TFLMS's: 0 asynchronous copies; 2 or 3: a block's tensors come back
            only when its own backward pass starts (swapin_ahead/groupby ignored);
            1 or 3 also asked for synchronous swap-outs, which TF2 does not need (warned).
        excl_scopes, incl_scopes: TFLMS's scope sets: block name patterns excluded /
            the only ones included (added to ``excl_blocks`` / ``blocks``). So are the
            properties ``excl_output_by_scopes``, ``excl_input_by_scopes``,
            ``incl_output_by_scopes``, ``incl_input_by_scopes``.
        excl_types, incl_types: op types (``'Conv2D'``, ``'Relu'``) whose output tensors
            are never / the only ones swapped to the host (offload modes); also the
            properties ``excl_output_by_types``, ``incl_output_by_types``, and
            ``excl_input_by_types``, ``incl_input_by_types`` (types of the backward
            ops that read a tensor).
        starting_scope, starting_op_names: blocks before the first block matching these
            names are not touched. ``n_tensors``: touch at most ``n`` blocks (0: LMS off).
        lb: TFLMS's lower bound of the swap-in distance: ``swapin_ahead`` when that is -1.
        debug, debug_level: log each block's decision (level 2: the tensors swapped).
        **tflms: TFLMS knobs TF2 has no use for (``serialization``, ``gpu_device``, ...):
            accepted, and warned about by name when not TFLMS's default.

    LMS is a kerastrainer callback, a Keras callback (``LMSKerasCallback`` is the
    same class) and can be applied directly. ``lms.run(graph)`` (TF1) raises an
    error that shows the TF2 call.

    Example::

        @lms_block('res2')
        def res2(x):
            ...
        LMS('recompute').apply(model_desc)       # or callbacks=[LMS('recompute')]
        keras_model.fit(x, y, callbacks=[LMS(swapout_threshold=2, swapin_ahead=1, swapin_groupby=1)])
    """

    _chief_only = False  # every worker traces its own towers

    def __init__(self, policy: Optional[str] = None, blocks: Optional[Sequence] = None,
                 swapout_threshold: int = -1, swapin_ahead: int = -1, swapin_groupby: int = -1,
                 excl_blocks: Sequence = (), host_device: Optional[str] = None,
                 memory_budget: Union[int, str, None] = None, batch_size: Optional[int] = None, *,
                 sync_mode: int = 0, excl_scopes: Iterable[str] = (), incl_scopes: Iterable[str] = (),
                 excl_types: Iterable[str] = (), incl_types: Iterable[str] = (),
                 cpu_device: Optional[str] = None, starting_scope: Optional[str] = None,
                 starting_op_names: Optional[Iterable[str]] = None, n_tensors: int = -1,
                 lb: Optional[int] = None, debug: bool = False, debug_level: int = 1,
                 is_training: bool = True, **tflms: Any):
        _KerasCallbackBase.__init__(self)
        check_known(tflms, ())
        if not isinstance(policy, (str, type(None))) and _is_name_collection(policy):
            # TFLMS 2018: LMS(optimizer_scopes, graph=...) always swapped
            tflms.setdefault("optimizer_scopes", policy)
            policy = "offload"
        if policy is not None and policy not in POLICIES:
            hint = " (TFLMS's arguments are keywords here: swapout_threshold=...)" \
                if isinstance(policy, (int, np.integer)) else ""
            raise ValueError(f"LMS policy must be one of {POLICIES}; got {policy!r}{hint}.")
        if lb is not None and swapin_ahead == -1:
            swapin_ahead = lb
        for n, v in (("swapout_threshold", swapout_threshold), ("swapin_ahead", swapin_ahead),
                     ("swapin_groupby", swapin_groupby), ("n_tensors", n_tensors)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < -1:
                raise ValueError(f"LMS {n} must be an int >= -1 (-1: automatic); got {v!r}.")
        if sync_mode not in (0, 1, 2, 3):
            raise ValueError(f"LMS sync_mode must be 0, 1, 2 or 3 (TFLMS's modes); got {sync_mode!r}.")
        if debug_level not in (1, 2):
            raise ValueError(f"LMS debug_level must be 1 or 2; got {debug_level!r}.")
        if host_device is not None and cpu_device is not None and host_device != cpu_device:
            raise ValueError(f"LMS got host_device={host_device!r} and cpu_device={cpu_device!r}: they are "
                             "the same knob (TFLMS called it cpu_device); give one.")
        host_device = host_device or cpu_device or "/cpu:0"
        if isinstance(blocks, (str, bytes)):
            blocks = [blocks]
        if isinstance(excl_blocks, (str, bytes)):
            excl_blocks = [excl_blocks]
        tf.DeviceSpec.from_string(host_device)  # fails early on a malformed device
        warn_unsupported(tflms)
        self.tflms_knobs = dict(tflms)
        manual = swapout_threshold >= 0 and swapin_ahead >= 0 and swapin_groupby >= 0
        self._implicit_policy = policy is None
        self.policy = policy or ("offload" if manual else "auto")
        if self._implicit_policy:
            logger.info("LMS: policy %r (%s).", self.policy,
                        "swapout_threshold, swapin_ahead and swapin_groupby given, as TFLMS's manual mode"
                        if manual else "TFLMS's auto-tuning: -1 knobs")
        self.blocks = None if blocks is None else list(blocks)
        self.excl_blocks = list(excl_blocks)
        self.excl_scopes = as_name_set(excl_scopes, "excl_scopes")
        self.incl_scopes = as_name_set(incl_scopes, "incl_scopes")
        self.excl_types = as_name_set(excl_types, "excl_types")
        self.incl_types = as_name_set(incl_types, "incl_types")
        for prop in _SCOPE_PROPS + _TYPE_PROPS:
            setattr(self, "_" + prop, set())
        self.starting_scope = starting_scope
        self.starting_op_names = None if starting_op_names is None else \
            as_name_set(starting_op_names, "starting_op_names")
        self.n_tensors = int(n_tensors)
        self.sync_mode = int(sync_mode)
        if self.sync_mode in (1, 3):
            logger.warning("LMS: TFLMS's sync_mode=%d asks for synchronous swap-outs, which TF2 does not "
                           "need (the copy runs as soon as the tensor exists, the compute does not wait "
                           "for it); only the swap-in part of the mode is used.", self.sync_mode)
        self.debug, self.debug_level = bool(debug), int(debug_level)
        self.is_training = is_training
        self.host_device = host_device
        self.memory_budget = parse_bytes(memory_budget)
        self.batch_size = batch_size
        self.knobs = {"swapout_threshold": int(swapout_threshold), "swapin_ahead": int(swapin_ahead),
                      "swapin_groupby": int(swapin_groupby)}
        self.config = BlockConfig(host_device=host_device,
                                  swapin_ahead=1 if swapin_ahead < 0 else int(swapin_ahead),
                                  swapin_groupby=1 if swapin_groupby <= 0 else int(swapin_groupby),
                                  swapout_threshold=1 if swapout_threshold < 0 else int(swapout_threshold),
                                  sync_swapin=self.sync_mode in (2, 3))
        self.plan: Optional[Plan] = None
        self._plan_pending: Optional[Callable[[], None]] = None
        self._profiler: Optional[Profiler] = None
        self._profiling_thread = None
        self._lock = threading.RLock()
        self._wrapped_layers: List = []
        self._owners: List = []
        self._keras_models: List = []
        self._batch_seen: Optional[int] = None   # the batch of the training trace
        self._batch_data: Optional[int] = None   # the trainer's first batch
        self._reported = False
        self._checked = False
        self._warned_fallback = False
        self._in_fit = False                     # between Keras's on_train_begin and on_train_end
        self.found_blocks: Dict[str, None] = {}  # every block key traced, in forward order
        self.seen_blocks: Dict[str, str] = {}   # key -> mode used at the last trace
        self.last_report: Optional[Dict[str, Any]] = None

    # --- TFLMS's properties -------------------------------------------------------------------
    def run(self, graph=None, keras: bool = False):
        """TFLMS's TF1 graph edit: raises an error that shows the TF2 call to use."""
        raise RuntimeError(run_error_message("run(graph)"))

    def begin(self):
        """TFLMS's ``SessionRunHook.begin``: raises an error that shows the TF2 call to use."""
        raise RuntimeError(run_error_message("begin() (the SessionRunHook)"))

    @property
    def autotune_plot(self) -> bool:
        return bool(self.tflms_knobs.get("autotune_plot", False))

    @autotune_plot.setter
    def autotune_plot(self, value: bool) -> None:
        self.tflms_knobs["autotune_plot"] = value
        warn_unsupported({"autotune_plot": value})

    @property
    def is_training(self) -> bool:
        return self._is_training

    @is_training.setter
    def is_training(self, value: bool) -> None:
        if not value:
            logger.warning("LMS: TFLMS's is_training=False (edit an inference graph) has no TF2 meaning: "
                           "LMS acts on training traces only; inference runs as is.")
        self._is_training = bool(value)

    # --- which blocks ------------------------------------------------------------------------
    @staticmethod
    def _matches(key: str, patterns) -> bool:
        for p in patterns:
            if not isinstance(p, str):  # a Keras layer: its block key is its name
                if getattr(p, "name", None) == key:
                    return True
                continue
            if fnmatch.fnmatchcase(key, p) or key.startswith(p.rstrip("/") + "/"):
                return True
        return False

    def _excluded_patterns(self) -> List:
        return list(self.excl_blocks) + sorted(self.excl_scopes | self._excl_output_by_scopes |
                                               self._excl_input_by_scopes)

    def _included_patterns(self) -> Optional[List]:
        incl = sorted(self.incl_scopes | self._incl_output_by_scopes | self._incl_input_by_scopes)
        if self.blocks is None and not incl:
            return None
        return list(self.blocks or []) + incl

    def selects(self, key: str) -> bool:
        """Whether block ``key`` is one LMS may touch (``blocks``, ``excl_blocks`` and TFLMS's scopes)."""
        if self._matches(key, self._excluded_patterns()):
            return False
        incl = self._included_patterns()
        return incl is None or self._matches(key, incl)

    def _starts_here(self, key: str) -> bool:
        """TFLMS's starting_scope / starting_op_names / n_tensors, on blocks in forward order."""
        order = list(self.found_blocks)
        start = [p for p in ([self.starting_scope] if self.starting_scope else []) +
                 sorted(self.starting_op_names or ())]
        idx = order.index(key)
        if start:
            first = next((i for i, k in enumerate(order) if self._matches(k, start)), None)
            if first is None or idx < first:
                return False
            order = order[first:]
            idx -= first
        if self.n_tensors >= 0:
            taken = [k for k in order[:idx] if self.selects(k)]
            return len(taken) < self.n_tensors
        return True

    def mode_for(self, key: str) -> Optional[str]:
        """The mode of block ``key`` in the trace being built: a mode of ``MODES``, or None."""
        self.found_blocks.setdefault(key, None)
        if not self.selects(key) or not self._starts_here(key):
            return None
        if self._profiling_thread == threading.get_ident():
            return "profile"
        if self.policy != "auto":
            return self.policy
        if self._plan_pending is not None:
            self._run_pending_plan()
        return self.plan.modes.get(key) if self.plan is not None else None

    def note_batch(self, tensors) -> None:
        """Remember the static batch size of a training trace's block input (for 'auto')."""
        if self._batch_seen is not None:
            return
        for t in tf.nest.flatten(tensors):
            shape = getattr(t, "shape", None)
            if isinstance(t, tf.Tensor) and shape is not None and shape.rank and shape[0] is not None:
                self._batch_seen = int(shape[0])
                return

    # --- running a block ---------------------------------------------------------------------
    def run_block(self, key: str, fn: Callable, args: tuple, kwargs: dict, mode: Optional[str] = None,
                  reenter: Optional[Callable] = None):
        """Run ``fn(*args, **kwargs)`` as block ``key`` (called by ``lms_block`` and wrapped layers)."""
        mode = self.mode_for(key) if mode is None else mode
        if mode is None:
            return fn(*args, **kwargs)
        if mode == "profile":
            return self._profile_block(key, fn, args, kwargs)
        cfg = self.config
        if "offload" in mode and same_device(compute_device(), self.host_device):
            if self._implicit_policy and mode == "offload":
                # TFLMS's knobs on a machine whose host is the compute device: swapping frees
                # nothing, so the blocks it would swap are recomputed (same gradients, lower peak)
                if not self._warned_fallback:
                    self._warned_fallback = True
                    logger.warning("LMS: host device %s is the compute device (no GPU): swapping to it frees "
                                   "nothing, so the blocks TFLMS's knobs select are recomputed instead.",
                                   self.host_device)
                mode = "recompute"
                cfg = dataclasses.replace(cfg, keep_last_in_recompute=True)
            elif key not in self.seen_blocks:
                logger.warning("LMS: block '%s' is offloaded to %s, which is the compute device: "
                               "nothing moves. Set host_device to another device.", key, self.host_device)
        if "offload" in mode and self._has_type_filters():
            cfg = dataclasses.replace(cfg, tensor_filter=self._tensor_filter)
        self.seen_blocks[key] = mode
        return run_block(key, fn, args, kwargs, mode, cfg, reenter=reenter, report=self._report)

    def _has_type_filters(self) -> bool:
        return bool(self.excl_types or self.incl_types or any(getattr(self, "_" + p) for p in _TYPE_PROPS))

    def _tensor_filter(self, t: tf.Tensor, consumer) -> bool:
        """TFLMS's op-type filters: whether tensor ``t`` (read by ``consumer``, or None) may be swapped."""
        src = t.op.type
        if src in (self.excl_types | self._excl_output_by_types):
            return False
        incl_src = self.incl_types | self._incl_output_by_types
        if incl_src and src not in incl_src:
            return False
        if consumer is not None:
            if consumer.type in self._excl_input_by_types:
                return False
            if self._incl_input_by_types and consumer.type not in self._incl_input_by_types:
                return False
        return True

    def _report(self, state) -> None:
        """Called when the backward pass of a trace's first block is built: every block is known."""
        recs = list(state.blocks)
        n = len(recs)
        applied = [r for r in recs if r.get("applied")]
        swapped = sum(r.get("swapped", 0) for r in recs)
        self.last_report = {"blocks": n, "applied": [r["name"] for r in applied], "swapped_tensors": swapped,
                            "modes": {r["name"]: r["mode"] for r in applied}}
        if self.debug:
            for r in recs:
                logger.info("LMS debug: block %d '%s': %s%s", r["index"], r["name"],
                            r["mode"] if r.get("applied") else "kept on the device",
                            f", {r.get('swapped', 0)} tensor(s) swapped" if r.get("swapped") else "")
                if self.debug_level >= 2 and r.get("swapped_names"):
                    logger.info("LMS debug:   swapped %s", ", ".join(r["swapped_names"]))
        if self._reported:
            return
        self._reported = True
        if not applied and n:
            t = self.knobs["swapout_threshold"]
            why = (f"swapout_threshold={t} keeps the last {t} blocks on the device, and {n} block(s) were "
                   f"found ({n} selected of {len(self.found_blocks)})" if t >= n
                   else "every block was kept on the device")
            logger.warning("LMS selects nothing: %s, so nothing is swapped or recomputed. Here the knobs "
                           "count blocks (lms_block s or Keras sub-layers), not graph levels as in TFLMS: "
                           "use swapout_threshold below %d (0 touches every block) and swapin_ahead / "
                           "swapin_groupby of a few blocks.", why, n)
        else:
            logger.info("LMS: %d block(s) found; %d handled (%s); %d tensor(s) swapped to %s.", n, len(applied),
                        ", ".join(f"{r['name']}={r['mode']}" for r in applied), swapped, self.host_device)

    def _check_selection(self) -> None:
        """After the first training step: warn when the patterns matched none of the blocks found."""
        if self._checked:
            return
        self._checked = True
        if not self.found_blocks:
            logger.warning("LMS found no block in the training step: mark parts of the tower function with "
                           "lms_block(name, fn), or (Keras) give blocks= with layer names.")
        elif not self.seen_blocks and self.policy != "auto":
            logger.warning("LMS selects none of the %d block(s) found (%s) with blocks=%s, excluded %s%s.",
                           len(self.found_blocks), ", ".join(list(self.found_blocks)[:12]),
                           self._included_patterns(), self._excluded_patterns(),
                           f", starting_scope={self.starting_scope!r}" if self.starting_scope else "")

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

    def _known_batch(self, specs=()) -> Optional[int]:
        """The batch 'auto' estimates with: given, seen in the training trace, the trainer's, the specs'."""
        for b in (self.batch_size, self._batch_seen, self._batch_data):
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
            kmodel = model if isinstance(model, keras.Model) else kmodel
            if any(m is kmodel for m in self._keras_models):
                return model  # already applied by this LMS (fit, then evaluate with the same callbacks)
            return self._apply_keras(kmodel) and model
        store = getattr(model, "layer_store", model)
        from ..tfutils.layer_store import LayerStore
        if not isinstance(store, LayerStore):
            raise TypeError(f"LMS.apply needs a ModelDesc, a LayerStore or a keras.Model; got "
                            f"{type(model).__name__}.")
        if any(o is store for o in self._owners):
            return model
        _state.activate(store, self)
        self._owners.append(store)
        if self.policy == "auto":
            if hasattr(model, "get_tower_function"):
                self._plan_pending = lambda: self._plan_tower(model)
                # built and the batch known: plan now, so the log comes before training; else
                # at the first training trace, with the batch size it sees
                if not store.allow_create and self._known_batch(model.get_input_signature()) is not None:
                    self._run_pending_plan()
            else:
                logger.warning("LMS auto on a bare LayerStore cannot profile; recomputing every block.")
                self.policy = "recompute"
        return model

    def _keras_blocks(self, kmodel) -> List:
        keras = _keras()
        layers = [l for l in sublayers(kmodel, recursive=True)]
        incl = self._included_patterns()
        if incl is None:
            direct = [l for l in sublayers(kmodel, recursive=False)
                      if not isinstance(l, keras.layers.InputLayer)]
            chosen = [l for l in direct
                      if sublayers(l, recursive=False)]
            if not chosen:
                # a flat model (Sequential of plain layers): one block per layer;
                # random layers (Dropout: a SeedGenerator) cannot be recomputed; the output layer's
                # backward pass comes first (nothing to save) and Keras's loss reads its softmax's
                # logits, which a wrapped call would hide
                chosen = [l for l in direct[:-1] if not layer_draws_random(l)]
                left = [l.name for l in direct[:-1] if layer_draws_random(l)]
                logger.info("LMS: Keras model '%s' is flat: one block per layer (%d layers; the output layer "
                            "%s%s stays plain).", kmodel.name, len(chosen), direct[-1].name if direct else "",
                            (", random layers " + ", ".join(left)) if left else "")
            if not chosen:
                raise ValueError(f"LMS: Keras model '{kmodel.name}' has no layer to use as a block; give "
                                 "blocks= (layer names, patterns or layers).")
        else:
            objs = [b for b in incl if isinstance(b, keras.layers.Layer)]
            chosen = [l for l in layers if any(l is o for o in objs) or self._matches(l.name, incl)]
            if not chosen:
                raise ValueError(f"LMS: no sub-layer of '{kmodel.name}' matches blocks={incl}; "
                                 f"its layers are {[l.name for l in layers][:20]}.")
        excl_objs = [b for b in self.excl_blocks if isinstance(b, keras.layers.Layer)]
        excl = self._excluded_patterns()
        return [(l.name, l) for l in chosen
                if not any(l is e for e in excl_objs) and not self._matches(l.name, excl)]

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
                if lms._profiling_thread != threading.get_ident():
                    lms.note_batch(flat)
                mode = lms.mode_for(_key)
                if mode is None:
                    return _orig(*args, **kwargs)
                with _inside(_key):
                    return lms.run_block(_key, _orig, args, kwargs, mode=mode,
                                         reenter=lambda: _inside(_key))

            object.__setattr__(layer, "call", call)
            object.__setattr__(layer, "_lms_original_call", orig)
            self._wrapped_layers.append(layer)
        self._keras_models.append(kmodel)
        if self.policy == "auto":
            self._plan_pending = lambda: self._plan_keras(kmodel)
            inputs = getattr(kmodel, "inputs", None) or []
            specs = [tf.TensorSpec(t.shape, t.dtype) for t in tf.nest.flatten(inputs)]
            if kmodel.built and self._known_batch(specs) is not None:
                self._run_pending_plan()
            # else: planned at the first training trace, with the batch size it sees
        logger.info("LMS (%s) on Keras model '%s': blocks %s", self.policy, kmodel.name,
                    [l.name for l in self._wrapped_layers])
        return True

    def remove(self) -> None:
        """Undo :meth:`apply`: unwrap Keras layers and deactivate on tower stores."""
        for layer in self._wrapped_layers:
            object.__setattr__(layer, "call", layer._lms_original_call)
            object.__setattr__(layer, "_lms_original_call", None)
        self._wrapped_layers = []
        for kmodel in self._keras_models:
            # the cached train function was traced with LMS: trace again without it
            if getattr(kmodel, "train_function", None) is not None:
                kmodel.train_function = None
        self._keras_models = []
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
        self._batch_data = _first_batch_size(getattr(self.trainer, "input", None))
        disable_xla = getattr(self.trainer, "disable_xla", None)
        if disable_xla is not None:  # one XLA cluster would ignore the host copies and fuse away the recompute
            disable_xla("LMS swaps activations to the host and recomputes them, which an XLA-compiled step undoes")
        self.apply(self.trainer.model)

    def _trigger_step(self):
        self._check_selection()

    def _after_train(self):
        self.remove()

    # --- as a Keras callback: keras.Model.fit(callbacks=[lms]) --------------------------------
    def set_model(self, model) -> None:
        """Keras: install LMS on the model fit trains (before its train function is traced)."""
        _KerasCallbackBase.set_model(self, model)
        if not any(m is model for m in self._keras_models):
            if getattr(model, "train_function", None) is not None:
                model.train_function = None  # traced without LMS: make fit trace it again
            self.apply(model)

    def set_params(self, params) -> None:
        _KerasCallbackBase.set_params(self, params)
        if params and params.get("batch_size") and self._batch_data is None:
            self._batch_data = int(params["batch_size"])

    def on_train_begin(self, logs=None) -> None:
        self._in_fit = True

    def on_train_batch_end(self, batch, logs=None) -> None:
        self._check_selection()

    def on_train_end(self, logs=None) -> None:
        self._in_fit = False
        self.remove()

    def on_test_end(self, logs=None) -> None:
        if not self._in_fit:  # evaluate(callbacks=[lms]) alone: undo set_model
            self.remove()

    def on_predict_end(self, logs=None) -> None:
        if not self._in_fit:
            self.remove()

    def __str__(self):
        return f"LMS({self.policy})"


LMSKerasCallback = LMS  # TFLMS's Keras callback name: the same class
LMSSessionRunHook = LMS  # TFLMS's Estimator hook name: its begin() says what to use in TF2


def _property(name: str):
    def get(self):
        return getattr(self, "_" + name)

    def set_(self, value):
        setattr(self, "_" + name, as_name_set(value, name))
    return property(get, set_, doc=f"TFLMS's ``{name}`` (a set of names); see :class:`LMS`.")


for _name in _SCOPE_PROPS + _TYPE_PROPS:
    setattr(LMS, _name, _property(_name))


def _first_batch_size(source, depth: int = 0) -> Optional[int]:
    """The batch size of the first datapoint an InputSource holds, when it holds one (QueueInput)."""
    if source is None or depth > 3:
        return None
    first = getattr(source, "_first", None)
    if first:
        shape = getattr(first[0], "shape", ())
        return int(shape[0]) if len(shape) else None
    for attr in ("input", "_input", "source", "_source"):
        inner = getattr(source, attr, None)
        if inner is not None and inner is not source:
            b = _first_batch_size(inner, depth + 1)
            if b is not None:
                return b
    return None
