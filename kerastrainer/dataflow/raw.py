"""DataFlow sources: lists, generators, iterables and fake data.

Example::

    from kerastrainer.dataflow import DataFromList, FakeData

    ds = DataFromList([[i, i * i] for i in range(10)], shuffle=True)
    ds.reset_state()
    for x, y in ds:
        ...

    fake = FakeData([[28, 28], [1]], size=100, dtype=['float32', 'int32'], domain=(0, 10))
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence, Union

import numpy as np

from ..utils.rng import get_rng
from .base import DataFlow, RNGDataFlow
from .base import DataFlowSizeUnknown

__all__ = ["DataFromList", "DataFromGenerator", "DataFromIterable", "FakeData", "DataFromQueue"]


class DataFromList(RNGDataFlow):
    """Yield the elements of a list, in a new random order each epoch when ``shuffle``.

    Example::

        ds = DataFromList([[img, label] for img, label in pairs], shuffle=True)
        ds.reset_state()
        assert len(ds) == len(pairs)
    """

    def __init__(self, lst: Sequence[Any], shuffle: bool = True):
        if isinstance(lst, (str, bytes, Mapping)) or not hasattr(lst, "__len__") or not hasattr(lst, "__getitem__"):
            raise TypeError(f"DataFromList needs a list of datapoints, got {type(lst).__name__}; "
                            "use DataFromIterable or DataFromGenerator for other iterables.")
        self.lst = lst
        self.shuffle = bool(shuffle)

    def __len__(self) -> int:
        return len(self.lst)

    def __iter__(self) -> Iterator[Any]:
        if not self.shuffle:
            yield from self.lst
            return
        if self.rng is None:  # reset_state() was skipped: still shuffle, do not crash
            self.rng = get_rng(self)
        for k in self.rng.permutation(len(self.lst)):
            yield self.lst[k]


class DataFromGenerator(DataFlow):
    """Wrap a generator, or a callable that returns a new generator each epoch.

    A generator object can be iterated only once; pass a callable to iterate
    many epochs. ``size`` is what ``len()`` reports (unknown when None).

    Example::

        def gen():
            for i in range(5):
                yield [i]

        ds = DataFromGenerator(gen, size=5)   # re-iterable
        once = DataFromGenerator(gen())       # one epoch only
    """

    def __init__(self, gen_or_callable: Union[Callable[[], Iterator[Any]], Iterator[Any]],
                 size: Optional[int] = None):
        if callable(gen_or_callable):
            self._make = gen_or_callable
            self._once = None
        elif hasattr(gen_or_callable, "__next__"):
            self._make = None
            self._once = gen_or_callable
        else:
            raise TypeError("DataFromGenerator needs a generator or a callable returning one, got "
                            f"{type(gen_or_callable).__name__}; use DataFromIterable for lists and other "
                            "re-iterable containers.")
        if size is not None and (not isinstance(size, (int, np.integer)) or size < 0):
            raise ValueError(f"DataFromGenerator size must be a non-negative int or None, got {size!r}")
        self._size = None if size is None else int(size)
        self._used = False

    def __len__(self) -> int:
        if self._size is None:
            raise DataFlowSizeUnknown("DataFromGenerator was built without size=, so its length is unknown")
        return self._size

    def __iter__(self) -> Iterator[Any]:
        if self._make is not None:
            gen = self._make()
            if not hasattr(gen, "__iter__"):
                raise TypeError(f"The callable given to DataFromGenerator returned {type(gen).__name__}, "
                                "not a generator or iterator")
            yield from gen
            return
        if self._used:
            raise RuntimeError("DataFromGenerator was given a generator object, which can be iterated only "
                               "once; pass a callable that returns a new generator to iterate several epochs.")
        self._used = True
        yield from self._once


class DataFromIterable(DataFlow):
    """Wrap a re-iterable container (list, tuple, range, dict values, a custom iterable).

    ``len()`` is the container's length when it has one.

    Example::

        ds = DataFromIterable(range(10))   # datapoints are whatever the iterable yields
    """

    def __init__(self, iterable: Iterable[Any]):
        if not hasattr(iterable, "__iter__"):
            raise TypeError(f"DataFromIterable needs an iterable, got {type(iterable).__name__}")
        if inspect.isgenerator(iterable) or iter(iterable) is iterable:
            # an iterator would silently be empty from the second epoch on
            raise TypeError("DataFromIterable needs a re-iterable container, got an iterator "
                            f"({type(iterable).__name__}); use DataFromGenerator for one-shot iterators.")
        self._itr = iterable
        try:
            self._len = len(iterable)  # type: ignore[arg-type]
        except TypeError:
            self._len = None

    def __len__(self) -> int:
        if self._len is None:
            raise DataFlowSizeUnknown(f"{type(self._itr).__name__} has no length")
        return self._len

    def __iter__(self) -> Iterator[Any]:
        yield from self._itr


class FakeData(RNGDataFlow):
    """Random datapoints of fixed shapes, for tests and benchmarks.

    Args:
        shapes: one shape (list of ints) per component.
        size: the number of datapoints of one epoch.
        random: new values for every datapoint; when False, one datapoint is made
            once and yielded every time (the fastest source there is).
        dtype: a dtype for all components, or a list with one per component.
        domain: ``(low, high)`` for all components, or a list of pairs. Floats are
            uniform in ``[low, high)``; integers are in ``[low, high)`` too
            (``domain=(0, 10)`` gives labels 0..9); bools are True or False.

    Example::

        ds = FakeData([[32, 32, 3], []], size=64, dtype=['uint8', 'int32'], domain=[(0, 256), (0, 10)])
    """

    def __init__(self, shapes: Sequence[Sequence[int]], size: int = 1000, random: bool = True,
                 dtype: Union[str, np.dtype, Sequence[Union[str, np.dtype]]] = "float32",
                 domain: Union[Sequence[float], Sequence[Sequence[float]]] = (0, 1)):
        if isinstance(shapes, (str, bytes)) or not isinstance(shapes, Sequence) or not shapes:
            raise TypeError(f"FakeData shapes must be a non-empty list of shapes, e.g. [[28, 28], [1]], got {shapes!r}")
        self.shapes = []
        for i, s in enumerate(shapes):
            if isinstance(s, (int, np.integer)) or not all(isinstance(d, (int, np.integer)) and d >= 0 for d in s):
                raise ValueError(f"FakeData shape of component {i} must be a list of non-negative ints, got {s!r}; "
                                 "shapes is a list of shapes, e.g. [[28, 28], [1]]")
            self.shapes.append(tuple(int(d) for d in s))
        n = len(self.shapes)
        if not isinstance(size, (int, np.integer)) or size < 0:
            raise ValueError(f"FakeData size must be a non-negative int, got {size!r}")
        self._size = int(size)
        self.random = bool(random)

        dtypes = list(dtype) if isinstance(dtype, (list, tuple)) else [dtype] * n
        if len(dtypes) != n:
            raise ValueError(f"FakeData got {len(dtypes)} dtypes for {n} shapes; give one dtype or one per shape")
        self.dtypes = [np.dtype(d) for d in dtypes]
        for i, dt in enumerate(self.dtypes):
            if dt.kind not in "iubfc":
                raise TypeError(f"FakeData cannot make values of dtype {dt} (component {i}); "
                                "use a numeric or bool dtype")

        if len(domain) == 2 and all(np.isscalar(v) for v in domain):
            domains = [tuple(domain)] * n
        else:
            domains = [tuple(d) for d in domain]
        if len(domains) != n or any(len(d) != 2 for d in domains):
            raise ValueError(f"FakeData domain must be (low, high) or a list of {n} such pairs, got {domain!r}")
        for i, (lo, hi) in enumerate(domains):
            if not lo < hi:
                raise ValueError(f"FakeData domain of component {i} must have low < high, got {(lo, hi)}")
            if self.dtypes[i].kind in "iu" and int(np.ceil(lo)) >= int(np.ceil(hi)):
                raise ValueError(f"FakeData domain {(lo, hi)} of integer component {i} holds no integer; "
                                 "integers are drawn from [low, high)")
        self.domains = domains
        self._fixed = None

    def __len__(self) -> int:
        return self._size

    def _component(self, i: int) -> np.ndarray:
        shape, dt, (lo, hi) = self.shapes[i], self.dtypes[i], self.domains[i]
        if dt.kind in "iu":
            return self.rng.randint(int(np.ceil(lo)), int(np.ceil(hi)), size=shape).astype(dt, copy=False)
        if dt.kind == "b":
            return self.rng.random_sample(shape) < 0.5
        if dt.kind == "c":
            re = self.rng.uniform(lo, hi, size=shape)
            im = self.rng.uniform(lo, hi, size=shape)
            return (re + 1j * im).astype(dt)
        return self.rng.uniform(lo, hi, size=shape).astype(dt, copy=False)

    def _datapoint(self) -> list:
        return [self._component(i) for i in range(len(self.shapes))]

    def __iter__(self) -> Iterator[list]:
        if self.rng is None:
            self.rng = get_rng(self)
        if self.random:
            for _ in range(self._size):
                yield self._datapoint()
        else:
            if self._fixed is None:
                self._fixed = self._datapoint()
            for _ in range(self._size):
                yield list(self._fixed)  # a new list, so that a consumer's edit does not leak


class DataFromQueue(DataFlow):
    """Produce datapoints from a queue (``queue.Queue`` or ``multiprocessing.Queue``), forever:
    each iteration takes the next element with ``queue.get()``.

    Example::

        q = queue.Queue(); ...   # a producer thread puts datapoints
        ds = DataFromQueue(q)
    """

    def __init__(self, queue):
        if not hasattr(queue, "get"):
            raise TypeError(f"DataFromQueue: {type(queue).__name__} has no get(); give a queue")
        self.queue = queue

    def __iter__(self) -> Iterator[Any]:
        while True:
            yield self.queue.get()
