"""Data for Keras users: numpy arrays, ``tf.data``, ``keras.utils.PyDataset`` or a DataFlow.

:func:`as_keras_data` accepts what ``keras.Model.fit`` accepts and gives a
:class:`KerasData`: global batches of ``(x, y)``. Once the model's flat signature
is known (:class:`~kerastrainer.keras.structure.ModelIO`), ``make_input`` turns it
into an InputSource for the trainer:

- a ``PyDataset``, a Python generator of ``(x, y)`` batches or a DataFlow -> a
  DataFlow of flat batches -> ``QueueInput``;
- a ``tf.data.Dataset`` -> ``TFDatasetInput``; numpy arrays too when training
  (``arrays_as_dataset``: a ``tf.data`` pipeline over the arrays), else a DataFlow.

The batch is **global**, for every kind of data: with N replicas in all (the
replicas of this process times the workers) each global batch is split into N
per-replica batches (sizes differ by at most one when the batch does not divide
evenly; a batch smaller than N is dropped, with a warning). This is Keras' rule;
ModelDesc trainers instead take one DataFlow batch per tower. With W workers, a
batched source (``tf.data``, ``PyDataset``, generator, DataFlow) is read whole by
every worker, and worker r trains on parts ``r*L .. r*L+L-1`` of each batch (L
replicas a worker): the parts one process with ``W*L`` replicas would get
(``tf.distribute``'s ``AutoShardPolicy.DATA`` does the same). Numpy arrays are
sharded by sample instead (``fit`` does it: every W-th sample, ``batch_size / W``
a step; see ``KerasModel.fit``). Each flat batch ends with one
more component, the replica's *share* ``n_replica * N / n_global`` (1.0 for an
even split or a whole batch): the tower weights its loss by it, so uneven splits
give the whole batch's loss and gradients.

Example::

    data = as_keras_data((x_train, y_train), batch_size=64)
    source, steps = data.make_input(io, num_replicas=2)
    source, steps = data.make_input(io, num_replicas=1, worker=(1, 2))   # worker 1 of 2: 2nd half
"""
from __future__ import annotations

import inspect
import itertools
import math
import random
from typing import Callable, Optional, Tuple

import keras
import numpy as np
import tensorflow as tf

from ..dataflow.base import DataFlow, ProxyDataFlow, RNGDataFlow, is_dataflow
from ..input_source.base import InputSource
from ..input_source.dataset import TFDatasetInput
from ..input_source.queue import QueueInput
from ..utils import logger
from ..utils.casting import whole_number

__all__ = ["KerasData", "as_keras_data", "ArrayBatches", "SplitBatches", "PyDatasetFlow", "TFDatasetFlow",
           "GeneratorFlow", "SpecSample", "SHARE_SPEC"]

DEFAULT_BATCH_SIZE = 32
#: the last component of every flat batch: the replica's share of the global batch
SHARE_SPEC = tf.TensorSpec([], tf.float32, name="replica_share")


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


class _FirstBatches(ProxyDataFlow):
    """The first ``n`` datapoints of each pass (Keras' ``validation_steps``); a generator reads on."""

    def __init__(self, ds, n: int):
        super().__init__(ds)
        self.n = int(n)

    def __len__(self) -> int:
        try:
            return min(self.n, len(self.ds))
        except (TypeError, NotImplementedError):
            return self.n

    def __iter__(self):
        yield from itertools.islice(self.ds, self.n)


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


def _split_dataset(ds: tf.data.Dataset, n: int, parts: Optional[range] = None) -> tf.data.Dataset:
    """Each flat global batch -> ``n`` consecutive per-replica batches and their shares (see
    :class:`SplitBatches`), only those of ``parts`` (default all); batches smaller than n are
    dropped, with one warning."""
    warned = []

    def warn(size):  # in Python (tf.py_function), only for a dropped batch
        if not warned:
            warned.append(True)
            logger.warning("A batch of %d samples cannot be split across %d replicas; it is skipped.",
                           int(size), n)
        return False

    def keep(*c):
        size = tf.shape(c[0], out_type=tf.int64)[0]
        return tf.cond(size >= n, lambda: tf.constant(True),
                       lambda: tf.reshape(tf.py_function(warn, [size], tf.bool), []))

    ds = ds.filter(keep)
    parts = range(n) if parts is None else parts
    index = tf.data.Dataset.range(parts.start, parts.stop)

    def expand(*comps):
        size = tf.shape(comps[0], out_type=tf.int64)[0]

        def part(i):
            lo, hi = (i * size) // n, ((i + 1) * size) // n
            share = tf.cast((hi - lo) * n, tf.float32) / tf.cast(size, tf.float32)
            return tuple(c[lo:hi] for c in comps) + (share,)
        return index.map(part)

    return ds.flat_map(expand)


class KerasData:
    """Data in one of the forms ``keras.Model.fit`` takes, as global batches of ``(x, y)``.

    Use :func:`as_keras_data` to make one.
    """

    def __init__(self, kind: str, source, first, steps: Optional[int], bare_x: bool = False,
                 read_ahead: int = 50):
        self.kind = kind            # 'dataflow' or 'dataset'
        self.read_ahead = int(read_ahead)   # batches a DataFlow's input thread reads ahead at most
        self.source = source
        self.first = first          # the first datapoint: (x, y) or a flat list / dict
        self.steps = steps          # global batches in one pass, or None when unknown
        # the data are x alone, given bare (an array or a dict of arrays, a PyDataset's dict) and read
        # as (x,): Keras hands such data to a train_step as x itself (pack_x_y_sample_weight's rule)
        self.bare_x = bool(bare_x)

    @property
    def step_first(self):
        """The first batch as Keras hands it to a model's own ``train_step``."""
        return self.first[0] if self.bare_x else self.first

    def flat_dataflow(self, flatten: Callable, with_share: bool = False) -> DataFlow:
        """A DataFlow of flat numpy batches ``[inputs..., targets...]`` (global batches), ending
        with the share 1.0 when ``with_share``."""
        if self.kind == "dataset":
            return _FlatBatches(TFDatasetFlow(self.source), flatten, with_share)
        return _FlatBatches(self.source, flatten, with_share)

    def make_input(self, flatten: Callable, num_replicas: int,
                   worker: Tuple[int, int] = (0, 1)) -> Tuple[InputSource, Optional[int]]:
        """``(InputSource, steps per epoch)``; each global batch is split over ``num_replicas``
        times the workers, each part followed by its share (see :class:`SplitBatches`).
        ``worker=(rank, size)``: this worker's ``num_replicas`` parts of each global batch
        (every worker reads every batch; ``steps`` is the number of global batches)."""
        rank, size = int(worker[0]), int(worker[1])
        if size < 1 or not 0 <= rank < size:
            raise ValueError(f"worker=(rank, size) must have 0 <= rank < size; got {worker!r}.")
        total = num_replicas * size
        parts = range(rank * num_replicas, (rank + 1) * num_replicas)
        if self.kind == "dataset":
            ds = self.source.map(lambda *e: tuple(flatten(_as_datapoint(e))))
            if total > 1:
                ds = _split_dataset(ds, total, parts)
            else:
                ds = ds.map(lambda *c: tuple(c) + (tf.constant(1.0),))
            return TFDatasetInput(ds), self.steps
        flow = _FlatBatches(self.source, flatten)
        flow = SplitBatches(flow, total, with_share=True, parts=parts) if total > 1 else \
            _FlatBatches(self.source, flatten, with_share=True)
        return QueueInput(flow, capacity=self.read_ahead), self.steps


def _arrays_dataset(flow: ArrayBatches) -> tf.data.Dataset:
    """``flow``'s batches as a ``tf.data`` pipeline (no Python between steps): the arrays held once
    as tensors, each batch a gather of (reshuffled each epoch) indices, as Keras's own array adapter."""
    n, bs = flow.n, flow.batch_size
    arrays = (flow.x,) if flow.y is None else ((flow.x, flow.y) if flow.sample_weight is None
                                              else (flow.x, flow.y, flow.sample_weight))
    # tf.data stacks a list of arrays into one tensor: lists become tuples (structures); float64
    # becomes Keras's float type, as Keras's own array adapter and kerastrainer's queue do
    floatx = keras.config.floatx()

    def as_tuples(a):
        if isinstance(a, (list, tuple)):
            return tuple(as_tuples(v) for v in a)
        if isinstance(a, dict):
            return {k: as_tuples(v) for k, v in a.items()}
        return a.astype(floatx) if a.dtype == np.float64 and floatx != "float64" else a
    held = tf.data.Dataset.from_tensors(as_tuples(arrays)).repeat()
    order = tf.data.Dataset.range(n)
    if flow.shuffle:
        order = order.shuffle(n, reshuffle_each_iteration=True)
    batches = tf.data.Dataset.zip((order.batch(bs), held))
    ds = batches.map(lambda idx, a: tf.nest.map_structure(lambda t: tf.gather(t, idx), a),
                     num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.prefetch(tf.data.AUTOTUNE)


def _as_datapoint(elem: tuple):
    """A dataset element (the arguments ``Dataset.map`` passes) as a datapoint: ``(x, y)``, a flat
    tuple, a dict, or ``(x,)`` for an element that is ``x`` alone (a model trained on its
    ``add_loss`` losses takes no targets)."""
    if len(elem) == 1 and isinstance(elem[0], (dict, tuple, list)):
        return elem[0]
    return elem


def _dataflow_len(ds) -> Optional[int]:
    try:
        return int(len(ds))
    except (TypeError, NotImplementedError):
        return None


def as_keras_data(data, y=None, batch_size: Optional[int] = None, shuffle: bool = True,
                  sample_weight=None, arrays_as_dataset: bool = False) -> KerasData:
    """Wrap ``data`` (see the module doc). ``data`` may be ``(x, y)`` or ``(x, y, sample_weight)``,
    or ``x`` with ``y`` (and ``sample_weight``) given apart, or ``x`` alone (arrays; batches ``(x,)``)
    for a model compiled with ``loss=None``. Batched sources may yield ``(x, y, sample_weight)``.

    ``batch_size`` and ``sample_weight`` apply to numpy arrays only (default batch 32); other
    sources are batched already and carry their own weights. ``arrays_as_dataset``: numpy arrays
    become a ``tf.data`` pipeline (training: no Python between steps) instead of a DataFlow.

    Example::

        as_keras_data(x, y, batch_size=64, sample_weight=w).first   # (x[:64], y[:64], w[:64])
    """
    if isinstance(data, KerasData):
        return data
    if sample_weight is not None and not (_is_arrays(data) or isinstance(data, tuple)):
        raise ValueError(f"sample_weight= applies to numpy arrays; a {type(data).__name__} carries its own "
                         "weights: yield (x, y, sample_weight) batches.")
    if isinstance(data, tf.data.Dataset):
        _no_batch_size(batch_size, "a tf.data.Dataset")
        n = int(data.cardinality())
        if n == 0:
            raise ValueError("The tf.data.Dataset is empty.")
        first = _stand_in(data.element_spec)
        if first is None:   # (a ragged or sparse element: read the first one)
            first = next(iter(data.take(1)), None)
            if first is None:
                raise ValueError("The tf.data.Dataset is empty.")
            first = _map(lambda t: t.numpy(), first)
        return KerasData("dataset", data, first, n if n >= 0 else None)
    if isinstance(data, keras.utils.PyDataset):
        _no_batch_size(batch_size, "a keras.utils.PyDataset")
        flow = _Peeked(PyDatasetFlow(data, shuffle=shuffle))
        # read ahead no further than Keras's own queue for this PyDataset (its max_queue_size)
        ahead = whole_number(getattr(data, "max_queue_size", None) or 10, "PyDataset.max_queue_size", minimum=1)
        return KerasData("dataflow", flow, flow.peek(), _dataflow_len(flow), bare_x=_read_bare(flow),
                         read_ahead=ahead)
    if is_dataflow(data):
        _no_batch_size(batch_size, "a DataFlow")
        flow = _Peeked(data)
        return KerasData("dataflow", flow, flow.peek(), _dataflow_len(data))
    if inspect.isgenerator(data) or (y is None and hasattr(data, "__next__") and hasattr(data, "__iter__")):
        _no_batch_size(batch_size, "a generator")
        flow = _Peeked(GeneratorFlow(data))
        return KerasData("dataflow", flow, flow.peek(), None)
    if y is None and isinstance(data, tuple) and len(data) == 3 and sample_weight is None:
        data, y, sample_weight = data
    if y is None and isinstance(data, tuple) and len(data) == 2:
        data, y = data
    if y is None and not _is_arrays(data):
        raise TypeError(f"Cannot train on a {type(data).__name__}: give (x, y) numpy arrays, a tf.data.Dataset, "
                        "a keras.utils.PyDataset or a DataFlow of (x, y) batches.")
    # y None: inputs only, batches (x,) (Keras' fit(x) for a model whose add_loss losses are the loss)
    try:
        flow = ArrayBatches(data, y, batch_size or DEFAULT_BATCH_SIZE, shuffle=shuffle, sample_weight=sample_weight)
    except TypeError as e:
        raise TypeError(f"Cannot read the data as numpy arrays: {e}") from e
    first = flow.batch(slice(0, flow.batch_size))
    bare = y is None and not isinstance(data, (list, tuple))
    if arrays_as_dataset:
        return KerasData("dataset", _arrays_dataset(flow), first, len(flow), bare_x=bare)
    return KerasData("dataflow", flow, first, len(flow), bare_x=bare)


def _read_bare(flow: "_Peeked") -> bool:
    """Whether the peeked first item of a PyDataset was x alone, as Keras keeps it (a dict)."""
    return bool(getattr(flow.ds, "bare_x", False))


class SpecSample:
    """A stand-in for one component of a dataset's first batch, made from its ``TensorSpec``: reading
    the first element would use up a shuffled pipeline's first reshuffle (the first epoch would see
    another order than under ``fit`` with the same seed). As an array it is zeros (unknown sizes 1);
    its ``shape`` is the spec's, unknown sizes None."""

    def __init__(self, spec: tf.TensorSpec):
        self.shape = tuple(spec.shape.as_list())
        self.dtype = spec.dtype
        self.ndim = len(self.shape)

    def __array__(self, dtype=None, copy=None):
        np_dtype = self.dtype.as_numpy_dtype
        arr = np.full([1 if d is None else d for d in self.shape], b"" if np_dtype is object else 0, np_dtype)
        return arr if dtype is None else arr.astype(dtype)

    def __len__(self) -> int:
        return 1 if not self.shape or self.shape[0] is None else self.shape[0]

    def __getitem__(self, index):
        return np.asarray(self)[index]


def _stand_in(element_spec):
    """The structure of ``element_spec`` with a :class:`SpecSample` per spec; None when a component is
    not a plain dense tensor of known rank."""
    specs = tf.nest.flatten(element_spec)
    if not specs or not all(type(s) is tf.TensorSpec and s.shape.rank for s in specs):
        return None
    return tf.nest.map_structure(SpecSample, element_spec)


def _is_arrays(data) -> bool:
    """Whether ``data`` is array-like inputs ``x``: an array, or a list / dict of arrays."""
    leaves = _leaves(data)
    return bool(leaves) and all(hasattr(a, "shape") and hasattr(a, "dtype") for a in leaves)


def _no_batch_size(batch_size, what: str) -> None:
    if batch_size is not None:
        raise ValueError(f"batch_size applies to numpy arrays only; {what} is already batched. "
                         "Leave batch_size out.")


# --- Keras's class_weight and validation_split ---------------------------------------------------
def class_weights_of(y, class_weight: dict):
    """Keras's sample weights for ``class_weight`` (numpy): a one-hot ``y`` is its argmax, a
    ``(n, 1)`` column is squeezed, labels are rounded to ints; a class left out weighs 1.

    Example::

        class_weights_of(np.array([0, 1, 1]), {1: 2.0})   # [1., 2., 2.]
    """
    y = np.asarray(y)
    if y.ndim > 1:
        y = np.argmax(y, axis=-1) if y.shape[-1] != 1 else np.squeeze(y, axis=-1)
    labels = np.round(y).astype("int64")
    return np.array([float(class_weight.get(int(c), 1.0)) for c in labels.reshape(-1)],
                    np.float32).reshape(labels.shape)


def _class_weights_tf(y, class_weight: dict) -> tf.Tensor:
    """:func:`class_weights_of` on a tensor (a ``tf.data`` map)."""
    y = tf.convert_to_tensor(y)
    if y.shape.rank is not None and y.shape.rank > 1:
        y = tf.argmax(y, axis=-1) if y.shape[-1] != 1 else tf.squeeze(y, axis=-1)
    labels = tf.cast(tf.round(tf.cast(y, tf.float32)), tf.int64)
    n = max(int(k) for k in class_weight) + 1
    table = np.ones(n, np.float32)
    for k, v in class_weight.items():
        table[int(k)] = float(v)
    in_range = tf.logical_and(labels >= 0, labels < n)
    return tf.where(in_range, tf.gather(tf.constant(table), tf.clip_by_value(labels, 0, n - 1)), 1.0)


class _ClassWeighted(ProxyDataFlow):
    """``(x, y)`` batches -> ``(x, y, class weights of y)``."""

    def __init__(self, ds, class_weight: dict):
        super().__init__(ds)
        self.class_weight = class_weight

    def __iter__(self):
        for dp in self.ds:
            yield _with_class_weights(dp, self.class_weight)


def _with_class_weights(dp, class_weight: dict):
    if not (isinstance(dp, (list, tuple)) and len(dp) == 2):
        raise ValueError("class_weight needs (x, y) batches with one target array (as in Keras); "
                         f"got a datapoint of {len(dp) if hasattr(dp, '__len__') else '?'} components.")
    if isinstance(dp[1], (list, tuple, dict)):
        raise ValueError("class_weight is not supported for a model with several targets (as in Keras): "
                         "give sample_weight instead.")
    return (dp[0], dp[1], class_weights_of(dp[1], class_weight))


def apply_class_weight(data, class_weight: dict):
    """``data`` (any form ``fit`` takes, not numpy arrays) with Keras's class weights as its
    sample weights: a ``tf.data.Dataset`` is mapped, the rest become a DataFlow."""
    if isinstance(data, tf.data.Dataset):
        def add(*e):
            if len(e) != 2 or isinstance(e[1], (tuple, dict)):
                raise ValueError("class_weight needs a dataset of (x, y) batches with one target (as in Keras).")
            return e[0], e[1], _class_weights_tf(e[1], class_weight)
        return data.map(add)
    if isinstance(data, keras.utils.PyDataset):
        return _ClassWeighted(PyDatasetFlow(data), class_weight)
    if is_dataflow(data):
        return _ClassWeighted(data, class_weight)
    if inspect.isgenerator(data) or (hasattr(data, "__next__") and hasattr(data, "__iter__")):
        return _ClassWeighted(GeneratorFlow(data), class_weight)
    raise TypeError(f"class_weight cannot be applied to a {type(data).__name__}.")


def split_validation(x, y, sample_weight, fraction: float):
    """Keras's ``validation_split``: the last ``fraction`` of the samples (taken before any
    shuffling) is the validation data. Returns ``((x, y, sw) for training, (x, y, sw) held out)``.

    Example::

        (xt, yt, _), (xv, yv, _) = split_validation(x, y, None, 0.2)   # xv = x[int(0.8 * n):]
    """
    if not _is_arrays(x):
        raise ValueError("validation_split is only supported for numpy arrays (as in Keras); give "
                         "validation_data for a tf.data.Dataset, a PyDataset, a generator or a DataFlow.")
    n = len(_leaves(x)[0])
    split_at = int(math.floor(n * (1.0 - fraction)))
    if split_at == 0 or split_at == n:
        raise ValueError(f"validation_split={fraction} leaves no training or no validation sample of {n}.")
    head = lambda s: None if s is None else _map(lambda a: np.asarray(a)[:split_at], s)  # noqa: E731
    tail = lambda s: None if s is None else _map(lambda a: np.asarray(a)[split_at:], s)  # noqa: E731
    return (head(x), head(y), head(sample_weight)), (tail(x), tail(y), tail(sample_weight))
