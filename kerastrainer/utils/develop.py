"""Helpers for writing the library at tensorpack's path (``tensorpack.utils.develop``): stand-ins for
names whose optional dependency is missing, deprecation warnings, lazily imported modules.

Example::

    try:
        import lmdb
    except ImportError:
        LMDBData = create_dummy_class('LMDBData', 'lmdb')   # using it raises ImportError naming lmdb

    @deprecated("Use new_api() instead.", "2026-12-31")
    def old_api(): ...
"""
from __future__ import annotations

import datetime
import functools
import importlib
import inspect
import os
import threading
import types
from collections import defaultdict
from typing import Callable, Optional, Sequence, Union

from . import logger

__all__ = []   # as tensorpack's: imported by path, never star-exported


def _unavailable(name: str, dependency: str) -> str:
    return f"Cannot import '{dependency}', therefore '{name}' is not available"


def create_dummy_class(klass: str, dependency: str) -> type:
    """A stand-in for the class ``klass`` whose ``dependency`` cannot be imported: constructing it
    raises ImportError, reading a class attribute AttributeError, both naming the dependency."""
    class _Meta(type):
        def __getattr__(cls, attr):
            raise AttributeError(_unavailable(klass, dependency))

    def __init__(self, *args, **kwargs):
        raise ImportError(_unavailable(klass, dependency))

    return _Meta(klass, (object,), {"__init__": __init__})


def create_dummy_func(func: str, dependency: Union[str, Sequence[str]]) -> Callable:
    """A stand-in for the function ``func`` whose ``dependency`` (a name, or a list of names)
    cannot be imported: calling it raises ImportError naming them."""
    if isinstance(dependency, (list, tuple)):
        dependency = ",".join(dependency)

    def dummy(*args, **kwargs):
        raise ImportError(_unavailable(func, dependency))
    dummy.__name__ = func
    return dummy


def building_rtfd() -> bool:
    """True while documentation is being built (``READTHEDOCS=True`` or ``DOC_BUILDING`` set)."""
    return os.environ.get("READTHEDOCS") == "True" or bool(os.environ.get("DOC_BUILDING"))


_warned = defaultdict(int)
_warned_lock = threading.Lock()


def log_deprecated(name: str = "", text: str = "", eos: str = "", max_num_warnings: Optional[int] = None) -> None:
    """Log a ``[Deprecated]`` warning about ``name`` (and/or ``text``); ``eos`` is the end of the
    legacy period as ``YYYY-MM-DD``; ``max_num_warnings`` caps how often the same warning is logged."""
    if not name and not text:
        raise ValueError("log_deprecated: give the deprecated name or a text.")
    when = ""
    if eos:
        y, m, d = (int(p) for p in eos.split("-"))
        when = "after " + datetime.date(y, m, d).strftime("%d %b")
    if name:
        msg = f"{name} will be deprecated {when}. {text}" if when else f"{name} was deprecated. {text}"
    else:
        msg = text + (f" Legacy period ends {when}" if when else "")
    if max_num_warnings is not None:
        with _warned_lock:
            if _warned[msg] >= max_num_warnings:
                return
            _warned[msg] += 1
    logger.warn("[Deprecated] " + msg)


def deprecated(text: str = "", eos: str = "", max_num_warnings: Optional[int] = None) -> Callable:
    """A decorator: each call of the function logs :func:`log_deprecated` with its name and the
    place of the program's outermost frame."""
    def wrap(func):
        @functools.wraps(func)
        def call(*args, **kwargs):
            outer = inspect.stack(0)[-1]
            log_deprecated(f"{func.__name__} [{outer.filename}:{outer.lineno}]", text, eos,
                           max_num_warnings=max_num_warnings)
            return func(*args, **kwargs)
        return call
    return wrap


def HIDE_DOC(func: Callable) -> Callable:
    """Mark ``func`` to be left out of the generated documentation."""
    func.__HIDE_SPHINX_DOC__ = True
    return func


class LazyLoader(types.ModuleType):
    """A module imported at its first use: ``tf = LazyLoader('tf', globals(), 'tensorflow')`` binds
    ``tf`` to this stand-in, which imports ``tensorflow`` when an attribute is first read and then
    replaces itself in ``parent_module_globals``."""

    def __init__(self, local_name: str, parent_module_globals: dict, name: str):
        super().__init__(name)
        self._local_name = local_name
        self._parent_module_globals = parent_module_globals

    def _load(self) -> types.ModuleType:
        module = importlib.import_module(self.__name__)
        self._parent_module_globals[self._local_name] = module
        self.__dict__.update(module.__dict__)   # later reads of this stand-in find the names directly
        return module

    def __getattr__(self, item):
        return getattr(self._load(), item)

    def __dir__(self):
        return dir(self._load())
