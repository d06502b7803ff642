"""``LMSKnobs``: what an :class:`~kerastrainer.lms.LMS` was asked to do, TFLMS's names included.

Owns the intake of LMS's constructor arguments: checking each one, reading IBM
TFLMS's names onto LMS's (``cpu_device`` is ``host_device``, ``lb`` is
``swapin_ahead``, ``LMS(optimizer_scopes)`` swaps, ``sync_mode``, the -1 knobs that
pick ``'auto'``), the :class:`~kerastrainer.lms.recompute.BlockConfig` the swap knobs
make, TFLMS's properties (the eight ``excl_/incl_`` ``output_/input_``
``by_scopes``/``by_types`` sets, ``autotune_plot``, ``is_training``), TFLMS's op-type
filter on swapped tensors, and TFLMS's TF1 entry points: ``run(graph)`` (the graph edit,
``graph_edit.py``) and ``begin`` (an error: TF 2.21 has no Estimator).

It leaves what the knobs mean for a model to others: which blocks the patterns
select (``selection.py``), what 'auto' plans (``autoplan.py``), how a block runs
(``runner.py``). :class:`~kerastrainer.lms.LMS` is an ``LMSKnobs`` (TFLMS had every
knob as an attribute of its LMS object), so each knob stays readable and settable there.

Example::

    knobs = LMSKnobs(swapout_threshold=2, swapin_ahead=1, swapin_groupby=0, cpu_device='/cpu:1')
    knobs.policy, knobs.config.swapin_groupby     # -> 'offload', 1
"""
from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence, Union

import numpy as np
import tensorflow as tf

from ..utils import logger
from .graph_edit import GraphEditReport, edit_graph
from .planner import parse_bytes
from .recompute import MODES, BlockConfig
from .tflms import as_name_set, check_known, run_error_message, warn_unsupported

__all__ = ["LMSKnobs", "POLICIES", "SCOPE_PROPERTIES", "TYPE_PROPERTIES"]

POLICIES = ("auto",) + MODES

SCOPE_PROPERTIES = ("excl_output_by_scopes", "excl_input_by_scopes", "incl_output_by_scopes",
                    "incl_input_by_scopes")
TYPE_PROPERTIES = ("excl_output_by_types", "excl_input_by_types", "incl_output_by_types",
                   "incl_input_by_types")


def _is_name_collection(v) -> bool:
    return isinstance(v, (set, frozenset, list, tuple)) and all(isinstance(x, str) for x in v)


class LMSKnobs:
    """LMS's arguments, checked, with TFLMS's read onto them; see :class:`~kerastrainer.lms.LMS` for each."""

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
        for prop in SCOPE_PROPERTIES + TYPE_PROPERTIES:
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
        # TFLMS's knobs given TFLMS's way (no policy): distances in topological levels of the
        # traced step, TFLMS's meaning; with a policy, kerastrainer's: counts of blocks
        op_levels = manual and self._implicit_policy
        self.config = BlockConfig(host_device=host_device,
                                  swapin_ahead=1 if swapin_ahead < 0 else int(swapin_ahead),
                                  swapin_groupby=(int(swapin_groupby) if op_levels else
                                                  1 if swapin_groupby <= 0 else int(swapin_groupby)),
                                  swapout_threshold=1 if swapout_threshold < 0 else int(swapout_threshold),
                                  sync_swapin=self.sync_mode in (2, 3), op_levels=op_levels)

    @property
    def policy_from_knobs(self) -> bool:
        """Whether no ``policy=`` was given (TFLMS's knobs chose it)."""
        return self._implicit_policy

    # --- TFLMS's TF1 entry points and properties ----------------------------------------------
    def run(self, graph: Optional[tf.Graph] = None, keras: bool = False) -> GraphEditReport:
        """TFLMS's graph form: edit ``graph`` (a ``tf.compat.v1`` graph, before ``Session.run``) in place,
        swapping to the host device the forward tensors its backward pass reads far away
        (``swapout_threshold`` / ``swapin_ahead`` / ``swapin_groupby`` in topological levels, as
        TFLMS). ``graph=None``: the ``graph=`` given to the constructor, else the default graph when
        TF builds a graph here (``with tf.Graph().as_default():``). Returns what was added; see
        ``kerastrainer/lms/graph_edit.py``.
        """
        if keras:
            raise RuntimeError("LMS.run(graph, keras=True) edited tf.keras's session graph; Keras 3 has none. "
                               "Give the LMS to fit instead: keras_model.fit(x, y, callbacks=[lms]).")
        if graph is None:
            graph = self.tflms_knobs.get("graph")
        if graph is None:
            if tf.executing_eagerly():
                raise RuntimeError(run_error_message("run() without a graph"))
            graph = tf.compat.v1.get_default_graph()
        self.graph_edit = edit_graph(self, graph)
        return self.graph_edit

    def begin(self):
        """TFLMS's ``SessionRunHook.begin``: raises an error that shows the TF2 call to use."""
        raise RuntimeError(run_error_message("begin() (the SessionRunHook)",
                                             "TF 2.21 has no Estimator to call this hook"))

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

    # --- the scope sets, as block name patterns ---------------------------------------------------
    def excluded_scopes(self) -> set:
        """``excl_scopes`` and TFLMS's ``excl_*_by_scopes`` properties together."""
        return self.excl_scopes | self._excl_output_by_scopes | self._excl_input_by_scopes

    def included_scopes(self) -> set:
        """``incl_scopes`` and TFLMS's ``incl_*_by_scopes`` properties together."""
        return self.incl_scopes | self._incl_output_by_scopes | self._incl_input_by_scopes

    # --- TFLMS's op-type filter on swapped tensors --------------------------------------------
    def has_type_filters(self) -> bool:
        return bool(self.excl_types or self.incl_types or any(getattr(self, "_" + p) for p in TYPE_PROPERTIES))

    def tensor_filter(self, t: tf.Tensor, consumer) -> bool:
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


def _name_set_property(name: str):
    def get(self):
        return getattr(self, "_" + name)

    def set_(self, value):
        setattr(self, "_" + name, as_name_set(value, name))
    return property(get, set_, doc=f"TFLMS's ``{name}`` (a set of names); see :class:`~kerastrainer.lms.LMS`.")


for _name in SCOPE_PROPERTIES + TYPE_PROPERTIES:
    setattr(LMSKnobs, _name, _name_set_property(_name))
