"""Device placement and gradient reduction for towers built in a custom trainer's TF1 graph
(tensorpack's ``graph_builder.utils``).

Example::

    raw = ['/gpu:0', '/gpu:1']
    setters = [LeastLoadedDeviceSetter(d, raw) for d in raw]
    with tf.device(setters[1]):
        ...                                   # tower 1's ops on /gpu:1 (or /cpu:1 without GPUs)
    grads = allreduce_grads([grads_tower0, grads_tower1], average=True)
"""
from __future__ import annotations

import operator
from typing import List, Sequence

import tensorflow as tf

from ..utils import logger

__all__ = ["LeastLoadedDeviceSetter", "allreduce_grads", "tower_device"]

_logged = set()


def _log_once(msg: str) -> None:
    if msg not in _logged:
        _logged.add(msg)
        logger.info(msg)


def tower_device(device: str) -> str:
    """The device a tower asked to run on ``device`` gets on this machine.

    A GPU that exists, or any CPU device, is used as named. ``/gpu:k`` on a machine without
    GPUs is the logical CPU device ``/cpu:k`` (tests and CPU machines split the CPU with
    ``ensure_tower_devices``), logged once; a GPU index that does not exist, or a ``/cpu:k``
    beyond the logical CPU devices, is a ValueError naming the devices there are.

    Example::

        with tf.device(tower_device('/gpu:1')):   # '/cpu:1' on a CPU machine with 2+ logical CPUs
            ...
    """
    spec = tf.DeviceSpec.from_string(device)
    kind = (spec.device_type or "CPU").upper()
    index = spec.device_index or 0
    gpus = tf.config.list_logical_devices("GPU")
    cpus = tf.config.list_logical_devices("CPU")
    if kind == "GPU" and gpus:
        if index >= len(gpus):
            raise ValueError(f"Tower device {device} does not exist: this process has {len(gpus)} GPU(s).")
        return spec.to_string()
    if kind == "GPU":
        if index >= len(cpus):
            raise ValueError(
                f"Tower device {device}: there is no GPU, and no logical CPU device {index} to use instead "
                f"({len(cpus)} logical CPU device(s)). Call kerastrainer.utils.devices.ensure_tower_devices(n) "
                "before TensorFlow starts to split the CPU into n devices.")
        mapped = spec.replace(device_type="CPU").to_string()
        _log_once(f"No GPU: towers asked for on /gpu:k run on the logical CPU device /cpu:k ({device} -> {mapped}).")
        return mapped
    if index >= len(cpus):
        raise ValueError(f"Tower device {device} does not exist: this process has {len(cpus)} logical CPU device(s).")
    return spec.to_string()


class LeastLoadedDeviceSetter:
    """A device function: a tower's ops go to ``worker_device``; variables made as graph ops go
    to the least loaded of ``ps_devices`` (by number of elements), as in tensorpack.

    In kerastrainer's custom-trainer graphs variables are made eagerly (they live outside the
    graph, shared by every tower), so in practice this places compute. Device names are passed
    through :func:`tower_device` (``/gpu:k`` -> ``/cpu:k`` without GPUs).

    Example::

        devices = [LeastLoadedDeviceSetter(d, raw_devices) for d in raw_devices]
        DataParallelBuilder.call_for_each_tower(list(range(2)), tower_fn, devices)
    """

    _VARIABLE_OPS = ("Variable", "VariableV2", "VarHandleOp")

    def __init__(self, worker_device: str, ps_devices: Sequence[str]):
        self.worker_device = tower_device(worker_device)
        self.ps_devices = [tower_device(d) for d in ps_devices]
        self.ps_sizes = [0] * len(self.ps_devices)

    def __call__(self, op) -> str:
        if op.device:
            return op.device
        if op.type not in self._VARIABLE_OPS:
            return self.worker_device
        return self.place_with_balance(op)

    def place_with_balance(self, op) -> str:
        index, _ = min(enumerate(self.ps_sizes), key=operator.itemgetter(1))
        size = op.outputs[0].get_shape().num_elements() if op.outputs else None
        if size is None:
            logger.warning("[LeastLoadedDeviceSetter] the shape of variable %s is not fully defined.", op.name)
            size = 0
        self.ps_sizes[index] += size
        return self.ps_devices[index]

    def __str__(self) -> str:
        return f"LeastLoadedDeviceSetter-{self.worker_device}"


def allreduce_grads(all_grads: Sequence[Sequence[tf.Tensor]], average: bool, mode: str = "nccl") -> List[list]:
    """Reduce the gradients of K towers: K lists of N gradients in, K lists of N out, each the
    sum (``average``: the mean) over the towers, placed on that tower's device.

    ``mode`` (``'nccl'``, ``'collective'``) is tensorpack's choice of TF1 kernels; here the sum is
    one ``add_n`` per variable in the graph (TF2 has no public NCCL op for graph code), logged
    once. Inside ``tf.distribute`` trainers the strategy all-reduces instead.

    Example::

        reduced = allreduce_grads([[g0_w, g0_b], [g1_w, g1_b]], average=True)
    """
    if mode not in ("nccl", "collective"):
        raise ValueError(f"allreduce_grads(mode=...) must be 'nccl' or 'collective'; got {mode!r}")
    towers = [list(g) for g in all_grads]
    if len(towers) == 1:
        return towers
    if len({len(g) for g in towers}) != 1:
        raise ValueError(f"allreduce_grads: the towers have different numbers of gradients: {[len(g) for g in towers]}")
    _log_once(f"allreduce_grads(mode={mode!r}): the towers' gradients are summed with add_n in the graph "
              "(TF2 has no public NCCL op for graph code).")
    out: List[list] = [[] for _ in towers]
    with tf.name_scope("AllReduceGrads"):
        for grads in zip(*towers):
            summed = tf.add_n(list(grads))
            for k, g in enumerate(grads):
                with tf.device(g.device):
                    r = tf.identity(summed)
                    out[k].append(r * (1.0 / len(towers)) if average else r)
    return out
