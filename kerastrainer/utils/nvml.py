"""``NVMLContext``: NVIDIA's management library (NVML) through ``pynvml`` (tensorpack's name).

Example::

    with NVMLContext() as ctx:
        for dev in ctx.devices():
            print(dev.memory()['used'], dev.utilization()['gpu'])
"""
from typing import Dict, List

__all__ = ["NVMLContext"]


class NvidiaDevice:
    """One GPU seen through NVML."""

    def __init__(self, nvml, handle):
        self._nvml, self._handle = nvml, handle

    def memory(self) -> Dict[str, int]:
        """``{'total', 'free', 'used'}`` in bytes."""
        m = self._nvml.nvmlDeviceGetMemoryInfo(self._handle)
        return {"total": m.total, "free": m.free, "used": m.used}

    def utilization(self) -> Dict[str, int]:
        """``{'gpu', 'memory'}`` utilisation in percent."""
        u = self._nvml.nvmlDeviceGetUtilizationRates(self._handle)
        return {"gpu": u.gpu, "memory": u.memory}


class NVMLContext:
    """Initialise NVML on entry and shut it down on exit; ``devices()``, ``device(i)``,
    ``num_devices()`` inside. Needs the ``nvidia-ml-py`` package (``import pynvml``) and an
    NVIDIA driver; without them entering raises ImportError / RuntimeError saying so.

    Example::

        with NVMLContext() as ctx:
            print(ctx.num_devices())
    """

    def __enter__(self) -> "NVMLContext":
        try:
            import pynvml
        except ImportError as e:
            raise ImportError("NVMLContext needs NVIDIA's NVML bindings: pip install nvidia-ml-py") from e
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            raise RuntimeError(f"NVMLContext: NVML could not start (no NVIDIA driver?): {e}") from e
        self._nvml = pynvml
        return self

    def __exit__(self, *exc) -> None:
        self._nvml.nvmlShutdown()

    def num_devices(self) -> int:
        return int(self._nvml.nvmlDeviceGetCount())

    def device(self, idx: int) -> NvidiaDevice:
        return NvidiaDevice(self._nvml, self._nvml.nvmlDeviceGetHandleByIndex(idx))

    def devices(self) -> List[NvidiaDevice]:
        return [self.device(i) for i in range(self.num_devices())]
