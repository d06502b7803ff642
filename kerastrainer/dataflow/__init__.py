"""DataFlows: composable data pipelines run in worker processes. No TensorFlow here.

Each module lists its public names in ``__all__``; they are all re-exported.
"""
import importlib

__all__ = []

# Order matters only for readability; every module is TF-free.
for _m in ("base", "common", "raw", "serialize", "parallel", "parallel_map", "remote", "image"):
    try:
        _mod = importlib.import_module(f"{__name__}.{_m}")
    except ModuleNotFoundError as _e:
        if _e.name != f"{__name__}.{_m}":
            raise
        continue
    for _n in getattr(_mod, "__all__", []):
        globals()[_n] = getattr(_mod, _n)
        __all__.append(_n)

from . import dataset  # noqa: E402
from . import imgaug  # noqa: E402

__all__ += ["dataset", "imgaug"]
