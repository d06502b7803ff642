"""tensorpack's ``graph_builder``: what custom trainers use to build towers in their TF1 graph.

- :class:`DataParallelBuilder` (``call_for_each_tower`` / ``build_on_towers``): call a tower
  function once per device, each in its ``TowerContext('tower{i}')``;
- :class:`LeastLoadedDeviceSetter`: a device function placing a tower's ops on its device;
- :func:`allreduce_grads`: sum (and average) the towers' gradients, one result per tower.

These build ops inside a custom trainer's graph (``TowerTrainer`` subclasses such as the GAN
examples' trainers). The standard trainers do not use them: ``tf.distribute`` strategies
replicate towers and reduce gradients there. ``/gpu:k`` devices on a machine without GPUs are
the logical CPU devices of the same index (logged once), as the standard trainers' towers are.
"""
from .training import DataParallelBuilder, GraphBuilder
from .utils import LeastLoadedDeviceSetter, allreduce_grads, tower_device

__all__ = ["DataParallelBuilder", "GraphBuilder", "LeastLoadedDeviceSetter", "allreduce_grads", "tower_device"]
