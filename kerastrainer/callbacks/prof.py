"""tensorpack's ``callbacks.prof``: memory trackers (GPU peak memory, free host RAM), and the
throughput / GPU-utilisation trackers of ``callbacks/prog.py``. ``GraphProfiler`` (TF1
``RunMetadata`` traces) raises, naming TF2's profiler."""
from __future__ import annotations

from typing import Optional, Sequence, Union

from ..utils import logger
from ..utils.tf1_only import tf1_only_class
from .base import Callback
from .prog import GPUUtilizationTracker, ThroughputTracker

__all__ = ["GPUUtilizationTracker", "GraphProfiler", "PeakMemoryTracker", "GPUMemoryTracker",
           "HostMemoryTracker", "ThroughputTracker"]


class GPUMemoryTracker(Callback):
    """At each epoch end, put the peak memory (MB) TensorFlow used on each GPU since the last
    reading into the monitors as ``PeakMemory(MB)/gpu:<i>``, then reset the peak. Without a GPU
    it warns once and does nothing (tensorpack did the same).

    Example::

        callbacks=[GPUMemoryTracker(devices=[0, 1])]
    """

    _chief_only = False

    def __init__(self, devices: Sequence[Union[int, str]] = (0,)):
        if not isinstance(devices, (list, tuple)):
            raise TypeError(f"GPUMemoryTracker: devices must be a list, got {devices!r}")
        self._devices = [f"GPU:{d}" if isinstance(d, int) else d.replace("/gpu:", "GPU:").lstrip("/")
                         for d in devices]
        self._disabled = False

    def _before_train(self):
        import tensorflow as tf
        if not tf.config.list_logical_devices("GPU"):
            logger.warning("%s: no GPU here; it records nothing.", type(self).__name__)
            self._disabled = True

    def _trigger(self):
        if self._disabled:
            return
        import tensorflow as tf
        for dev in self._devices:
            peak = tf.config.experimental.get_memory_info(dev)["peak"]
            self.trainer.monitors.put_scalar(f"PeakMemory(MB)/{dev.lower()}", peak / 1e6)
            tf.config.experimental.reset_memory_stats(dev)


PeakMemoryTracker = GPUMemoryTracker  # tensorpack's other name


class HostMemoryTracker(Callback):
    """Log the free host RAM at set-up and before training, and put it into the monitors as
    ``HostFreeMemory (GB)`` at each trigger.

    Example::

        callbacks=[HostMemoryTracker()]
    """

    _chief_only = False

    @staticmethod
    def _free_ram_gb() -> float:
        import psutil
        return psutil.virtual_memory().available / 1024 ** 3

    def _setup_graph(self):
        logger.info("[HostMemoryTracker] Free RAM in setup_graph() is %.2f GB.", self._free_ram_gb())

    def _before_train(self):
        logger.info("[HostMemoryTracker] Free RAM in before_train() is %.2f GB.", self._free_ram_gb())

    def _trigger(self):
        self.trainer.monitors.put_scalar("HostFreeMemory (GB)", self._free_ram_gb())


GraphProfiler = tf1_only_class(
    "GraphProfiler", __name__, "there are no session RunMetadata traces",
    "Profile with TF2's profiler: tf.profiler.experimental.start(logdir) / stop() around some "
    "steps (e.g. in a Callback's trigger_step), then open TensorBoard's Profile tab.",
    base=Callback)
