"""Small helpers of ``tensorpack.utils.utils``: environment switches, run-once, time formatting."""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator, Optional

from .rng import fix_rng_seed, get_rng

__all__ = ["change_env", "change_gpu", "get_rng", "fix_rng_seed", "execute_only_once", "humanize_time_delta",
           "get_tqdm"]


@contextmanager
def change_env(name: str, val: Optional[str]) -> Iterator[None]:
    """Set (or, with None, unset) environment variable ``name`` inside the block.

    Example::

        with change_env('CUDA_VISIBLE_DEVICES', '1'):
            ...
    """
    old = os.environ.get(name)
    if val is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = str(val)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def change_gpu(val) -> "contextmanager":
    """``CUDA_VISIBLE_DEVICES`` set to ``val`` (an index, a comma-separated list, or -1 for none)
    inside the block. It only affects TensorFlow if TF has not initialised its devices yet.

    Example::

        with change_gpu(1):
            pred = OfflinePredictor(config)
    """
    val = str(val)
    return change_env("CUDA_VISIBLE_DEVICES", "" if val == "-1" else val)


_executed = set()


def execute_only_once() -> bool:
    """True the first time the calling line runs, False afterwards.

    Example::

        if execute_only_once():
            logger.warning("said once")
    """
    import inspect
    f = inspect.currentframe().f_back
    key = (f.f_code.co_filename, f.f_lineno)
    if key in _executed:
        return False
    _executed.add(key)
    return True


def humanize_time_delta(sec: float) -> str:
    """``3725`` -> ``'1 hour 2 minutes 5 seconds'``.

    Example::

        assert humanize_time_delta(61) == '1 minute 1 second'
    """
    if sec < 0:
        return "-" + humanize_time_delta(-sec)
    if sec < 60:
        return f"{sec:.3g} second{'s' if sec != 1 else ''}"
    parts = []
    for unit, n in (("day", 86400), ("hour", 3600), ("minute", 60)):
        q = int(sec // n)
        if q:
            parts.append(f"{q} {unit}{'s' if q > 1 else ''}")
            sec -= q * n
    s = int(round(sec))
    if s:
        parts.append(f"{s} second{'s' if s > 1 else ''}")
    return " ".join(parts)


def get_tqdm(*args, **kwargs):
    """A ``tqdm`` progress bar with tensorpack's look (the ``tqdm`` package is a dependency)."""
    from tqdm import tqdm
    kwargs.setdefault("ascii", True)
    kwargs.setdefault("dynamic_ncols", True)
    return tqdm(*args, **kwargs)
