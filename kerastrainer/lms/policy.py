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

This module owns the coordination: ``apply`` / ``remove`` on each kind of model,
and the mode of a block met in a trace (selected? being profiled? the policy or
'auto''s plan). It leaves each concept to its module: the arguments and TFLMS's
knobs to ``knobs.py``, which blocks to ``selection.py``, 'auto''s profile and plan
to ``autoplan.py`` (arithmetic in ``planner.py``), running a block and the report
to ``runner.py``, the edit of a Keras model to ``keras_patching.py``, and the two
callback protocols to ``as_trainer_callback.py`` and ``as_keras_callback.py``.

Example::

    lms = LMS(policy='recompute', blocks=['res*'])
    launch_train_with_config(TrainConfig(model=Model(), dataflow=df, callbacks=[lms]), SimpleTrainer())

    lms = LMS('auto', memory_budget='6GB')      # or, directly:
    lms.apply(keras_model)                      # wraps the call of matching sub-layers
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Union

import keras

from ..tfutils.layer_store import LayerStore
from ..utils import logger
from . import _state
from .as_keras_callback import AsKerasCallback
from .as_trainer_callback import AsTrainerCallback
from .autoplan import AutoPlanner
from .keras_patching import KerasPatches
from .knobs import POLICIES, LMSKnobs
from .planner import Plan
from .runner import BlockRunner
from .selection import BlockSelection

__all__ = ["LMS", "LMSKerasCallback", "LMSSessionRunHook", "POLICIES"]


class LMS(LMSKnobs, AsTrainerCallback, AsKerasCallback):
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
        AsKerasCallback.__init__(self)
        LMSKnobs.__init__(self, policy, blocks, swapout_threshold, swapin_ahead, swapin_groupby, excl_blocks,
                          host_device, memory_budget, batch_size, sync_mode=sync_mode, excl_scopes=excl_scopes,
                          incl_scopes=incl_scopes, excl_types=excl_types, incl_types=incl_types,
                          cpu_device=cpu_device, starting_scope=starting_scope,
                          starting_op_names=starting_op_names, n_tensors=n_tensors, lb=lb, debug=debug,
                          debug_level=debug_level, is_training=is_training, **tflms)
        self._selection = BlockSelection(self)
        self._auto = AutoPlanner(self, self._selection)
        self._runner = BlockRunner(self, self._selection)
        self._keras = KerasPatches()
        self._owners: List = []  # the layer stores LMS is active on

    # --- what LMS knows after a trace ------------------------------------------------------------
    @property
    def plan(self) -> Optional[Plan]:
        """'auto''s plan (None before it is made, or for another policy)."""
        return self._auto.plan

    @plan.setter
    def plan(self, value: Optional[Plan]) -> None:
        self._auto.plan = value

    @property
    def found_blocks(self) -> Dict[str, None]:
        """Every block key traced, in forward order."""
        return self._selection.found_blocks

    @property
    def seen_blocks(self) -> Dict[str, str]:
        """Block key -> the mode it ran under at the last trace."""
        return self._runner.seen_blocks

    @property
    def last_report(self) -> Optional[Dict[str, Any]]:
        """After a trace: ``{'blocks': n, 'applied': [...], 'modes': {...}, 'swapped_tensors': k}``."""
        return self._runner.last_report

    @property
    def _wrapped_layers(self) -> List:
        return self._keras.layers

    # --- a block met in a trace (called by lms_block and wrapped layers) -------------------------
    def selects(self, key: str) -> bool:
        """Whether block ``key`` is one LMS may touch (``blocks``, ``excl_blocks`` and TFLMS's scopes)."""
        return self._selection.selects(key)

    def mode_for(self, key: str) -> Optional[str]:
        """The mode of block ``key`` in the trace being built: a mode of ``MODES``, ``'profile'`` or None."""
        if not self._selection.admits(key):
            return None
        if self._auto.profiling_here():
            return "profile"
        if self.policy != "auto":
            return self.policy
        return self._auto.mode_for(key)

    def profiling_here(self) -> bool:
        """Whether this thread runs 'auto''s scratch trace (blocks are measured, not run under a mode)."""
        return self._auto.profiling_here()

    def note_batch(self, tensors) -> None:
        """Remember the static batch size of a training trace's block input (for 'auto')."""
        self._auto.note_batch(tensors)

    def note_data_batch(self, batch: Optional[int], replace: bool = True) -> None:
        """The batch size of the data (the trainer's first batch, or fit's), for 'auto'."""
        if replace or self._auto.data_batch is None:
            self._auto.data_batch = batch

    def run_block(self, key: str, fn: Callable, args: tuple, kwargs: dict, mode: Optional[str] = None,
                  reenter: Optional[Callable] = None):
        """Run ``fn(*args, **kwargs)`` as block ``key`` (called by ``lms_block`` and wrapped layers)."""
        mode = self.mode_for(key) if mode is None else mode
        if mode is None:
            return fn(*args, **kwargs)
        if mode == "profile":
            return self._auto.profile_block(key, fn, args, kwargs)
        return self._runner.run(key, fn, args, kwargs, mode, reenter=reenter)

    def check_selection(self) -> None:
        """After the first training step: warn when the patterns matched none of the blocks found."""
        self._selection.check_once(self.seen_blocks)

    # --- installing --------------------------------------------------------------------------
    def apply(self, model):
        """Install LMS on ``model`` and return it.

        ``model``: a ``ModelDesc`` (its ``lms_block`` s), a ``LayerStore``, a
        ``keras.Model`` (its sub-layers' ``call`` is wrapped), or the adapter of
        ``KerasModel`` (its Keras model). Takes effect at the next trace of the
        training function.
        """
        kmodel = getattr(model, "keras_model", None)
        if isinstance(model, keras.Model) or isinstance(kmodel, keras.Model):
            kmodel = model if isinstance(model, keras.Model) else kmodel
            if not self.applied_to(kmodel):  # else: applied already (fit, then evaluate with the same callbacks)
                self._apply_keras(kmodel)
            return model
        store = getattr(model, "layer_store", model)
        if not isinstance(store, LayerStore):
            raise TypeError(f"LMS.apply needs a ModelDesc, a LayerStore or a keras.Model; got "
                            f"{type(model).__name__}.")
        if any(o is store for o in self._owners):
            return model
        _state.activate(store, self)
        self._owners.append(store)
        if self.policy == "auto":
            if hasattr(model, "get_tower_function"):
                self._auto.schedule_tower(model, store)
            else:
                logger.warning("LMS auto on a bare LayerStore cannot profile; recomputing every block.")
                self.policy = "recompute"
        return model

    def applied_to(self, kmodel) -> bool:
        """Whether this LMS has patched Keras model ``kmodel``."""
        return self._keras.holds(kmodel)

    def _apply_keras(self, kmodel) -> None:
        self._keras.wrap(kmodel, self._selection.keras_blocks(kmodel), self)
        if self.policy == "auto":
            self._auto.schedule_keras(kmodel)
        logger.info("LMS (%s) on Keras model '%s': blocks %s", self.policy, kmodel.name,
                    [l.name for l in self._keras.layers])

    def remove(self) -> None:
        """Undo :meth:`apply`: unwrap Keras layers and deactivate on tower stores."""
        self._keras.undo()
        for owner in self._owners:
            if _state.active_lms(owner) is self:
                _state.deactivate(owner)
        self._owners = []

    def __str__(self):
        return f"LMS({self.policy})"


LMSKerasCallback = LMS  # TFLMS's Keras callback name: the same class
LMSSessionRunHook = LMS  # TFLMS's Estimator hook name: its begin() says what to use in TF2
