"""Argument and memoization helpers of ``tensorpack.utils.argtools``.

Example::

    @memoized
    def get_keras_model():
        return keras.Sequential([...])     # one model, shared by every tower and trace
"""
from __future__ import annotations

import functools
import inspect
from typing import Callable, List, Sequence, Union

from . import logger

__all__ = ["map_arg", "memoized", "memoized_method", "memoized_ignoreargs", "graph_memoized", "shape2d",
           "shape4d", "get_data_format", "log_once", "call_only_once"]

memoized = functools.lru_cache(maxsize=None)
"""``functools.lru_cache(maxsize=None)``: keys and values stay alive."""


def graph_memoized(func: Callable) -> Callable:
    """tensorpack memoized per TF1 graph; in TF2 there is one program state, so this is
    :func:`memoized` (the layer store, not the graph, scopes what a model creates)."""
    return memoized(func)


def memoized_ignoreargs(func: Callable) -> Callable:
    """Call ``func`` once; later calls return the first result whatever their arguments."""
    box = []

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if not box:
            box.append(func(*args, **kwargs))
        return box[0]
    return wrapper


def memoized_method(func: Callable) -> Callable:
    """Memoize a method per instance (the cache lives on the object)."""
    @functools.wraps(func)
    def wrapper(self, *args, **kwargs):
        cache = self.__dict__.setdefault("_MEMOIZED_CACHE", {})
        key = (func.__name__,) + args + tuple(sorted(kwargs.items()))
        if key not in cache:
            cache[key] = func(self, *args, **kwargs)
        return cache[key]
    return wrapper


def map_arg(**maps: Callable) -> Callable:
    """Apply ``maps[name]`` to argument ``name`` before calling the function.

    Example::

        @map_arg(shape=shape2d)
        def f(shape): ...
    """
    def deco(func):
        sig = inspect.signature(func)

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            bound = sig.bind_partial(*args, **kwargs)
            for k, fn in maps.items():
                if k in bound.arguments:
                    bound.arguments[k] = fn(bound.arguments[k])
            return func(*bound.args, **bound.kwargs)
        return wrapper
    return deco


def shape2d(a: Union[int, Sequence[int]]) -> List[int]:
    """``3`` -> ``[3, 3]``; a pair stays a pair (as a list)."""
    if isinstance(a, int):
        return [a, a]
    if isinstance(a, (list, tuple)) and len(a) == 2:
        return list(a)
    raise ValueError(f"shape2d: expected an int or a pair of ints, got {a!r}")


def get_data_format(data_format: str, keras_mode: bool = True) -> str:
    """Map between ``'NHWC'``/``'NCHW'`` and ``'channels_last'``/``'channels_first'``."""
    dic = {"NCHW": "channels_first", "NHWC": "channels_last"}
    if not keras_mode:
        dic = {v: k for k, v in dic.items()}
    ret = dic.get(data_format, data_format)
    if ret not in dic.values():
        raise ValueError(f"Unknown data_format {data_format!r}; use 'NHWC'/'NCHW' or "
                         "'channels_last'/'channels_first'.")
    return ret


def shape4d(a: Union[int, Sequence[int]], data_format: str = "NHWC") -> List[int]:
    """``3`` -> ``[1, 3, 3, 1]`` (NHWC) or ``[1, 1, 3, 3]`` (NCHW)."""
    s = shape2d(a)
    return [1] + s + [1] if get_data_format(data_format, False) == "NHWC" else [1, 1] + s


@memoized
def log_once(message: str, func: str = "info") -> None:
    """Log ``message`` with ``logger.<func>`` the first time only."""
    getattr(logger, {"warn": "warning"}.get(func, func))(message)


def call_only_once(func: Callable) -> Callable:
    """A method that may run once per instance; a second call raises RuntimeError."""
    @functools.wraps(func)
    def wrapper(self, *args, **kwargs):
        done = self.__dict__.setdefault("_CALL_ONLY_ONCE_CACHE", set())
        if func.__name__ in done:
            raise RuntimeError(f"{type(self).__name__}.{func.__name__} can only be called once per object.")
        done.add(func.__name__)
        return func(self, *args, **kwargs)
    return wrapper
