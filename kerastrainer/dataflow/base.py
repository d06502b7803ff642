"""The DataFlow protocol.

A DataFlow is an iterable of *datapoints* (a list or a dict of components) with
``reset_state()`` called once per process before the first iteration, and an
optional ``__len__``. Any object with that protocol (a tensorpack DataFlow
included) is accepted wherever kerastrainer takes a DataFlow.

Example::

    class Squares(DataFlow):
        def __iter__(self):
            for i in range(10):
                yield [i, i * i]

        def __len__(self):
            return 10

    ds = Squares()
    ds.reset_state()
    for x, y in ds:
        ...
"""
from __future__ import annotations

import threading
from abc import ABCMeta, abstractmethod
from typing import Any, Iterator

from ..utils.rng import get_rng

__all__ = ["DataFlow", "RNGDataFlow", "ProxyDataFlow", "DataFlowTerminated", "DataFlowReentrantGuard",
           "DataFlowSizeUnknown", "is_dataflow", "check_dataflow"]


class DataFlowSizeUnknown(NotImplementedError, TypeError):
    """``len()`` of a DataFlow that does not know its size.

    Also a TypeError, so that ``list(ds)`` (which asks for a length hint) still works.
    """


class DataFlowTerminated(BaseException):
    """Raised by a DataFlow whose producer has ended and cannot produce more.

    It derives from BaseException so that generic ``except Exception`` blocks in
    user code do not swallow it.
    """


class DataFlowReentrantGuard:
    """Raise a clear error when one DataFlow is iterated by two threads at once."""

    def __init__(self, name: str = "DataFlow"):
        self._lock = threading.Lock()
        self._name = name

    def __enter__(self):
        if not self._lock.acquire(False):
            raise threading.ThreadError(
                f"{self._name} is being iterated by two threads at once; it is not reentrant. "
                "Give each thread its own DataFlow instance.")
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self._lock.release()
        return False


class DataFlow(metaclass=ABCMeta):
    """Base class of all DataFlows: the protocol is ``reset_state``, ``__iter__``, ``__len__``."""

    @abstractmethod
    def __iter__(self) -> Iterator[Any]:
        """Yield datapoints (lists or dicts of components)."""

    def __len__(self) -> int:
        """Number of datapoints of one iteration; raise NotImplementedError if unknown."""
        raise DataFlowSizeUnknown(f"{type(self).__name__} does not know its size")

    def reset_state(self) -> None:
        """Initialise per-process state (RNG, forked workers); call once before iterating."""

    def close(self) -> None:
        """Release processes, sockets and files this DataFlow (or what it wraps) holds."""

    # tensorpack compatibility
    def get_data(self):
        return self.__iter__()

    def size(self):
        return self.__len__()


class RNGDataFlow(DataFlow):
    """A DataFlow with a ``self.rng`` (numpy RandomState) reset per process."""

    rng = None

    def reset_state(self) -> None:
        self.rng = get_rng(self)


class ProxyDataFlow(DataFlow):
    """Base class of DataFlows that wrap another one and forward the protocol to it."""

    def __init__(self, ds):
        self.ds = ds

    def reset_state(self) -> None:
        self.ds.reset_state()

    def __len__(self) -> int:
        return self.ds.__len__()

    def __iter__(self):
        return self.ds.__iter__()

    def close(self) -> None:
        close = getattr(self.ds, "close", None)
        if callable(close):
            close()


def check_dataflow(obj, who: str, hint: str = ""):
    """Return ``obj`` if it has the DataFlow protocol, else raise a TypeError naming ``who``.

    ``hint`` is added to the message; lists and bare iterators get one of their own.
    """
    if not is_dataflow(obj):
        if isinstance(obj, (list, tuple)):
            hint = "Wrap a list of datapoints with DataFromList(lst). " + hint
        elif hasattr(obj, "__next__") or hasattr(obj, "__iter__"):
            hint = "Wrap it with DataFromGenerator or DataFromIterable. " + hint
        raise TypeError(f"{who} must be a DataFlow (an object with reset_state() and __iter__()), "
                        f"got {type(obj).__name__}. {hint}".rstrip())
    return obj


def is_dataflow(obj) -> bool:
    """True for anything with the DataFlow protocol (``reset_state`` and ``__iter__``)."""
    return callable(getattr(obj, "reset_state", None)) and callable(getattr(obj, "__iter__", None))
