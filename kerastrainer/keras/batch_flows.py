"""The DataFlows of Keras data: numpy arrays, a ``keras.utils.PyDataset``, a generator or a
finite ``tf.data.Dataset`` read as batches ``(x, y)``, and the proxies that flatten them and split
each global batch into per-replica parts (:class:`SplitBatches`: Keras's global-batch rule, each
part followed by its share of the batch).

This module owns reading each kind of data as a DataFlow and splitting batches in Python.
Which kind a ``fit`` argument is, the ``tf.data`` route and the InputSource made of it are
:mod:`~kerastrainer.keras.data`'s; ``class_weight`` and ``validation_split``
:mod:`~kerastrainer.keras.data_arguments`'.

Example::

    ds = ArrayBatches(x, y, batch_size=64, shuffle=True)
    ds = SplitBatches(ds, 2)    # a batch of 64 -> two batches of 32; 93 -> 47 and 46
"""
from __future__ import annotations

import math
import random
from typing import Callable, Optional

import numpy as np
import tensorflow as tf

from ..dataflow.base import DataFlow, ProxyDataFlow, RNGDataFlow
from ..utils import logger
from ..utils.casting import whole_number

__all__ = ["ArrayBatches", "SplitBatches", "PyDatasetFlow", "TFDatasetFlow", "GeneratorFlow", "DEFAULT_BATCH_SIZE"]

DEFAULT_BATCH_SIZE = 32


def _leaves(struct) -> list:
    if isinstance(struct, dict):
        return [v for k in struct for v in _leaves(struct[k])]
    if isinstance(struct, (list, tuple)):
        return [v for s in struct for v in _leaves(s)]
    return [struct]


def _map(fn: Callable, struct):
    if isinstance(struct, dict):
        return {k: _map(fn, v) for k, v in struct.items()}
    if isinstance(struct, (list, tuple)):
        return type(struct)(_map(fn, s) for s in struct) if isinstance(struct, tuple) else [_map(fn, s) for s in struct]
    return fn(struct)


def _is_arrays(data) -> bool:
    """Whether ``data`` is array-like inputs ``x``: an array, or a list / dict of arrays."""
    leaves = _leaves(data)
    return bool(leaves) and all(hasattr(a, "shape") and hasattr(a, "dtype") for a in leaves)


class ArrayBatches(RNGDataFlow):
    """Global batches ``(x, y)`` from in-memory arrays (x and y may be lists or dicts of arrays).

    The last batch of an epoch is smaller when ``batch_size`` does not divide the
    number of samples (as in ``keras.Model.fit``).

    Example::

        ds = ArrayBatches(x, y, batch_size=64, shuffle=True)
    """

    def __init__(self, x, y, batch_size: int = DEFAULT_BATCH_SIZE, shuffle: bool = True, sample_weight=None):
        if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int; got {batch_size!r}")
        x = _map(np.asarray, x)
        y = _map(np.asarray, y) if y is not None else None
        sw = _map(np.asarray, sample_weight) if sample_weight is not None else None
        if sw is not None and y is None:
            raise ValueError("sample_weight was given without targets y.")
        arrays = _leaves(x) + (_leaves(y) if y is not None else []) + (_leaves(sw) if sw is not None else [])
        sizes = {len(a) if a.ndim else -1 for a in arrays}
        if len(sizes) != 1 or -1 in sizes:
            shapes = [a.shape for a in arrays]
            raise ValueError(f"The input arrays must all have the same number of samples (first dimension); "
                             f"got shapes {shapes}.")
        self.n = sizes.pop()
        if self.n == 0:
            raise ValueError("The input arrays hold no sample.")
        self.x, self.y, self.sample_weight = x, y, sw
        self.batch_size = whole_number(batch_size, "batch_size", minimum=1)
        self.shuffle = bool(shuffle)
        # Keras's shuffle='batch': each batch's samples shuffled, the batches in order (the tf.data route)
        self.shuffle_mode = "batch" if isinstance(shuffle, str) and shuffle == "batch" else self.shuffle

    def __len__(self) -> int:
        return int(math.ceil(self.n / self.batch_size))

    def batch(self, idx):
        take = lambda a: a[idx]  # noqa: E731
        x = _map(take, self.x)
        if self.y is None:
            return (x,)
        if self.sample_weight is None:
            return (x, _map(take, self.y))
        return (x, _map(take, self.y), _map(take, self.sample_weight))

    def __iter__(self):
        order = np.arange(self.n)
        if self.shuffle:
            if self.rng is None:
                self.reset_state()
            self.rng.shuffle(order)
        for s in range(0, self.n, self.batch_size):
            idx = order[s:s + self.batch_size]
            # contiguous slices are views: cheaper than fancy indexing
            yield self.batch(slice(s, s + self.batch_size) if not self.shuffle else idx)


class PyDatasetFlow(DataFlow):
    """The batches of a ``keras.utils.PyDataset`` (or any ``keras.utils.Sequence``), in order, or
    with ``shuffle`` in another order each pass, drawn as Keras draws it (Python's ``random``,
    which ``keras.utils.set_random_seed`` seeds: the same order as ``fit`` under the same seed).

    ``on_epoch_end()`` of the PyDataset runs after each pass. Its own worker
    settings are not used: batches are read in the input thread (wrap the
    DataFlow in ``MultiProcessRunnerZMQ`` for parallel loading).
    """

    def __init__(self, pyds, shuffle: bool = False):
        self.pyds = pyds
        self.shuffle = bool(shuffle)
        self.bare_x = None   # whether the first item was a dict of inputs alone, once read

    def __len__(self) -> int:
        n = getattr(self.pyds, "num_batches", None)
        return int(n) if n is not None else len(self.pyds)

    def __iter__(self):
        order = list(range(len(self)))
        if self.shuffle:
            random.shuffle(order)
        for i in order:
            item = self.pyds[i]
            if self.bare_x is None:   # (Keras wraps a bare array as (x,), and keeps a dict as it is)
                self.bare_x = isinstance(item, dict)
            yield tuple(item) if isinstance(item, (list, tuple)) else (item,)
        end = getattr(self.pyds, "on_epoch_end", None)
        if callable(end):
            end()


class GeneratorFlow(DataFlow):
    """The batches of a Python generator or iterator (what Keras 2's ``fit_generator`` took).

    It is read on and never restarted: an endless generator gives every epoch, a finite
    one only its items. Its length is unknown: give ``steps_per_epoch``.
    """

    def __init__(self, iterator):
        self.iterator = iterator

    def __iter__(self):
        for item in self.iterator:
            yield tuple(item) if isinstance(item, (list, tuple)) else (item,)


class TFDatasetFlow(DataFlow):
    """A finite ``tf.data.Dataset`` read eagerly as a DataFlow of numpy datapoints (for validation)."""

    def __init__(self, dataset: tf.data.Dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        n = int(self.dataset.cardinality())
        if n < 0:
            raise NotImplementedError("the dataset's cardinality is unknown")
        return n

    def __iter__(self):
        for elem in self.dataset.as_numpy_iterator():
            yield elem


class _FlatBatches(ProxyDataFlow):
    """Flat ``[inputs..., targets...]`` lists from datapoints of any accepted form
    (``[..., share]`` with ``with_share``: a whole batch's share is 1)."""

    def __init__(self, ds, flatten: Callable, with_share: bool = False):
        super().__init__(ds)
        self.flatten = flatten
        self.with_share = with_share

    def __iter__(self):
        for dp in self.ds:
            flat = [np.asarray(c) for c in self.flatten(dp)]
            yield flat + [np.float32(1.0)] if self.with_share else flat


class SplitBatches(ProxyDataFlow):
    """Split each flat global batch into ``num_parts`` per-replica batches (Keras' global-batch rule).

    Batches smaller than ``num_parts`` are dropped, with one warning. With
    ``with_share`` each part ends with its share ``len(part) * num_parts / len(batch)``
    (a float32 scalar): the loss of a part weighted by its share, averaged over the
    parts, is the loss of the whole batch. ``parts`` (default all) are the indices of
    the parts yielded: a worker's own replicas' parts of a global batch.

    Example::

        ds = SplitBatches(ds, 2)    # a batch of 64 -> two batches of 32; 93 -> 47 and 46
        ds = SplitBatches(ds, 4, parts=range(2, 4))   # worker 1 of 2 (2 replicas each): the last 32
    """

    def __init__(self, ds, num_parts: int, with_share: bool = False, parts: Optional[range] = None):
        super().__init__(ds)
        self.num_parts = int(num_parts)
        self.with_share = with_share
        self.parts = range(self.num_parts) if parts is None else parts
        if not self.parts or self.parts[0] < 0 or self.parts[-1] >= self.num_parts:
            raise ValueError(f"parts={parts!r} must be a range inside range({self.num_parts}).")
        self._warned = False

    def __len__(self) -> int:
        return len(self.ds) * len(self.parts)

    def __iter__(self):
        n = self.num_parts
        for dp in self.ds:
            size = len(dp[0])
            if size < n:
                if not self._warned:
                    self._warned = True
                    logger.warning("A batch of %d samples cannot be split across %d replicas; it is skipped.",
                                   size, n)
                continue
            bounds = [(i * size) // n for i in range(n + 1)]
            for i in self.parts:
                part = [c[bounds[i]:bounds[i + 1]] for c in dp]
                if self.with_share:
                    part.append(np.float32((bounds[i + 1] - bounds[i]) * n / size))
                yield part


class _Peeked(ProxyDataFlow):
    """A DataFlow whose first datapoint was read to learn the data's shapes; it is yielded first."""

    def __init__(self, ds):
        super().__init__(ds)
        self._reset = False
        self._first = None
        self._it = None

    def reset_state(self):
        if not self._reset:  # the wrapped DataFlow is reset once per process
            self._reset = True
            self.ds.reset_state()

    def peek(self):
        if self._first is None:
            self.reset_state()
            self._it = iter(self.ds)
            try:
                self._first = next(self._it)
            except StopIteration:
                raise ValueError(f"The DataFlow {type(self.ds).__name__} produced no datapoint.") from None
        return self._first

    def __iter__(self):
        if self._it is not None:
            it, first = self._it, self._first
            self._it = None
            yield first
            yield from it
            return
        yield from self.ds
