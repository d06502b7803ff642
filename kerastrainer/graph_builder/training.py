"""``DataParallelBuilder``: build a tower on each device of a custom trainer's TF1 graph
(tensorpack's ``graph_builder.training``).

Each tower runs in ``TowerContext('tower{i}', is_training=True, index=i, total=K)`` under its
device. Towers share their variables by scoped name through the layer store (the first tower
creates them, the others reuse them), as tensorpack's towers shared one variable scope.

Example::

    costs = DataParallelBuilder.call_for_each_tower(
        [0, 1], lambda: tower_func(*input.get_input_tensors()),
        [LeastLoadedDeviceSetter(d, ['/gpu:0', '/gpu:1']) for d in ['/gpu:0', '/gpu:1']])
"""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence

import tensorflow as tf

from ..tfutils.tower import TowerContext
from ..utils import logger
from .utils import tower_device

__all__ = ["GraphBuilder", "DataParallelBuilder"]


class GraphBuilder:
    """Base class of tensorpack's graph builders: ``build(...)`` makes the training ops.

    Example::

        class MyBuilder(GraphBuilder):
            def build(self, get_grad_fn, get_opt_fn):
                return get_opt_fn().apply_gradients(get_grad_fn())
    """

    def build(self, *args, **kwargs):
        raise NotImplementedError


class DataParallelBuilder(GraphBuilder):
    """Build one training tower per device (tensorpack's data-parallel graph builder).

    Args:
        towers: device ids (``[0, 1]``: ``/gpu:0``, ``/gpu:1``; logical CPU devices without GPUs).

    Example::

        builder = DataParallelBuilder([0, 1])
        outputs = builder.call_for_each_tower([0, 1], lambda: tower_func(*inputs()))
    """

    def __init__(self, towers: Sequence[int]):
        self.towers = list(towers)
        if len(self.towers) > 1:
            logger.info("[DataParallel] Training a model of %d towers.", len(self.towers))

    @staticmethod
    def call_for_each_tower(towers: Sequence[int], func: Callable[[], object],
                            devices: Optional[Sequence] = None, use_vs: Optional[Sequence[bool]] = None) -> List:
        """Call ``func()`` once per tower, each under its device and ``TowerContext('tower{i}')``;
        returns the list of its results.

        Args:
            towers: device ids.
            func: builds one tower (called without arguments).
            devices: a device name or device function per tower (default ``/gpu:{id}``).
            use_vs: tensorpack's towers with their own variable scope: only False (towers share
                variables through the layer store); True is an error naming the TF2 way.
        """
        towers = list(towers)
        if devices is not None and len(devices) != len(towers):
            raise ValueError(f"call_for_each_tower: {len(devices)} devices for {len(towers)} towers.")
        if use_vs is not None:
            if len(use_vs) != len(towers):
                raise ValueError(f"call_for_each_tower: {len(use_vs)} use_vs flags for {len(towers)} towers.")
            if any(use_vs):
                raise ValueError("call_for_each_tower(use_vs=[..., True]): towers with their own copy of the "
                                 "variables (tensorpack's replicated towers) are not supported; towers share "
                                 "variables through the layer store. Use SyncMultiGPUTrainerReplicated for "
                                 "replicated training.")
        out = []
        for idx, t in enumerate(towers):
            device = devices[idx] if devices is not None else f"/gpu:{t}"
            if isinstance(device, str):
                device = tower_device(device)
                logger.info("Building graph for training tower %d on device %s ...", idx, device)
            else:
                logger.info("Building graph for training tower %d (%s) ...", idx, device)
            with tf.compat.v1.device(device), TowerContext(f"tower{idx}", is_training=True, index=idx,
                                                           total=len(towers)):
                out.append(func())
        return out

    @staticmethod
    def build_on_towers(towers: Sequence[int], func: Callable[[], object], devices: Optional[Sequence] = None,
                        use_vs: Optional[Sequence[bool]] = None) -> List:
        """The same as :meth:`call_for_each_tower` (tensorpack's older name)."""
        return DataParallelBuilder.call_for_each_tower(towers, func, devices, use_vs)
