"""Data for Keras users: numpy arrays, ``tf.data``, ``keras.utils.PyDataset`` or a DataFlow.

:func:`as_keras_data` accepts what ``keras.Model.fit`` accepts and gives a
:class:`KerasData`: global batches of ``(x, y)``. Once the model's flat signature
is known (:class:`~kerastrainer.keras.structure.ModelIO`), ``make_input`` turns it
into an InputSource for the trainer:

- a ``PyDataset``, a Python generator of ``(x, y)`` batches or a DataFlow -> a
  DataFlow of flat batches -> ``QueueInput``;
- a ``tf.data.Dataset`` -> :class:`KerasDatasetInput` (a ``TFDatasetInput`` read with the
  iterators ``keras.Model.fit`` makes, see below); numpy arrays too when training
  (``arrays_as_dataset``: a ``tf.data`` pipeline over the arrays, the batches in the order of
  Keras's own array adapter), else a DataFlow.

**The order of the batches is fit's.** Keras's epoch iterator makes a new iterator of the dataset
at each epoch's start and another, unread, at its end (when ``steps_per_epoch`` is not given; with
it, one iterator goes on until a pass is read, then the next): a pipeline shuffled with
``reshuffle_each_iteration`` draws a reshuffle for each, and numpy arrays draw a permutation per
iterator. :class:`KerasDatasetInput` makes the same iterators at the same points (its callback sees
each epoch's start and end) and hands the epoch's iterator to each call of the train function, so
under the same seed each epoch reads the batches ``fit`` reads, in its order.

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

The DataFlows of each kind of data and the split of a batch are
:mod:`~kerastrainer.keras.batch_flows`'; ``class_weight`` and ``validation_split``
:mod:`~kerastrainer.keras.data_arguments`'.

Example::

    data = as_keras_data((x_train, y_train), batch_size=64)
    source, steps = data.make_input(io, num_replicas=2)
    source, steps = data.make_input(io, num_replicas=1, worker=(1, 2))   # worker 1 of 2: 2nd half
"""
from __future__ import annotations

import inspect
from typing import Callable, Optional, Tuple

import keras
import numpy as np
import tensorflow as tf

from .._internals import keras_array_batch_indices
from ..callbacks.base import Callback
from ..dataflow.base import DataFlow, is_dataflow
from ..input_source.base import InputSource
from ..input_source.dataset import TFDatasetInput
from ..input_source.queue import QueueInput
from ..utils import logger
from ..utils.casting import whole_number
from .batch_flows import (DEFAULT_BATCH_SIZE, ArrayBatches, GeneratorFlow, PyDatasetFlow, SplitBatches,
                          TFDatasetFlow, _FlatBatches, _is_arrays, _map, _Peeked)

__all__ = ["KerasData", "KerasDatasetInput", "as_keras_data", "SpecSample", "SHARE_SPEC"]

#: the last component of every flat batch: the replica's share of the global batch
SHARE_SPEC = tf.TensorSpec([], tf.float32, name="replica_share")


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

    def make_input(self, flatten: Callable, num_replicas: int, worker: Tuple[int, int] = (0, 1),
                   steps_per_epoch: Optional[int] = None) -> Tuple[InputSource, Optional[int]]:
        """``(InputSource, steps per epoch)``; each global batch is split over ``num_replicas``
        times the workers, each part followed by its share (see :class:`SplitBatches`).
        ``worker=(rank, size)``: this worker's ``num_replicas`` parts of each global batch
        (every worker reads every batch; ``steps`` is the number of global batches).
        ``steps_per_epoch``: as given to ``fit`` (None: one pass), which decides when a ``tf.data``
        pipeline gets a new iterator (:class:`KerasDatasetInput`)."""
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
            return KerasDatasetInput(ds, self.steps, steps_per_epoch), self.steps
        flow = _FlatBatches(self.source, flatten)
        flow = SplitBatches(flow, total, with_share=True, parts=parts) if total > 1 else \
            _FlatBatches(self.source, flatten, with_share=True)
        return QueueInput(flow, capacity=self.read_ahead), self.steps


class _EpochIterators(Callback):
    """Tells a :class:`KerasDatasetInput` where each epoch starts and ends (on every worker)."""

    _chief_only = False

    def __init__(self, source: "KerasDatasetInput"):
        self.source = source

    def _before_epoch(self):
        self.source.epoch_begins()

    def _after_epoch(self):
        self.source.epoch_ends(self.trainer.local_step)


class KerasDatasetInput(TFDatasetInput):
    """A ``tf.data`` pipeline of Keras data (flat batches), read with the iterators
    ``keras.Model.fit`` makes (Keras 3.15's epoch iterator, with one step per execution).

    ``steps_per_epoch`` None (one pass, ``num_batches`` steps): a new iterator at each epoch's start,
    and one more made at its end and never read. ``steps_per_epoch`` given: an iterator goes on over
    the epochs until ``num_batches`` steps have been read from it (counted at the epochs' ends), then
    the next one is made. Each iterator is of the dataset repeated, read no further than asked, so an
    epoch that reads past a pass (a ``steps_per_epoch`` that does not divide the pass, where Keras
    ends the epoch early; a batch too small to split over the replicas, skipped) goes on into the
    next pass instead of failing.

    The trainer gets the current iterator from :meth:`call_inputs` at each call. A source read
    without it (wrapped in a ``StagingInput``, whose thread reads ahead across epochs) reads one
    iterator of the repeated dataset, as ``TFDatasetInput`` does, and makes no other.

    Example::

        source = KerasDatasetInput(ds, num_batches=10)   # fit(ds) with a dataset of 10 batches
    """

    iterate_at_setup = False   # (making one would draw the first reshuffle of a shuffled pipeline)

    def __init__(self, dataset: tf.data.Dataset, num_batches: Optional[int], steps_per_epoch: Optional[int] = None):
        super().__init__(dataset)
        self.num_batches = num_batches
        self.steps_per_epoch = steps_per_epoch
        self._current = None      # the iterator the epoch's calls read
        self._seen = 0            # steps read from it at the last epoch's end
        self._called = False      # the trainer asked for call_inputs: the epochs' iterators are made
        self._begin_pending = False
        self._epoch_dataset = None
        self._callback = _EpochIterators(self)
        self._staged_said = False
        if steps_per_epoch and num_batches and num_batches % steps_per_epoch:
            logger.warn("KerasModel.fit: steps_per_epoch=%d does not divide the data's %d batches: where "
                        "keras.Model.fit ends the epoch that runs out of data early, each epoch here runs "
                        "%d steps, reading on into the next pass.", steps_per_epoch, num_batches, steps_per_epoch)

    def _get_input_tensors(self, iterator=None):
        if iterator is None and not self._staged_said:
            # read by a StagingInput's thread (GPUs), which reads ahead across the epochs' ends
            self._staged_said = True
            logger.warn("KerasModel.fit: the data is read ahead by a staging thread: a pipeline that reshuffles "
                        "each pass gives each epoch the next reshuffle, not the one keras.Model.fit's epoch "
                        "iterators would read.")
        return super()._get_input_tensors(iterator)

    def get_callbacks(self):
        return [self._callback]

    def _new_iterator(self):
        # Each iterator reads its passes one after the other, and no further than asked: a
        # prefetch inside each pass, none injected after the repeat (tf.data's default), which
        # would start the next pass, drawing its reshuffle, before the epoch's end.
        if self._epoch_dataset is None:
            options = tf.data.Options()
            options.experimental_optimization.inject_prefetch = False
            self._epoch_dataset = self.dataset.prefetch(tf.data.AUTOTUNE).repeat().with_options(options)
        return iter(self._epoch_dataset)

    def call_inputs(self) -> list:
        if not self._called:
            self._called = True
            if self._begin_pending:   # (the first epoch began before the first call)
                self._begin_pending = False
                self._begin()
        if self._current is None:   # (a call outside an epoch)
            self._current = self._new_iterator()
            self._seen = 0
        return [self._current]

    def epoch_begins(self) -> None:
        if not self._called:
            self._begin_pending = True
            return
        self._begin()

    def _begin(self) -> None:
        if self._current is None or self.steps_per_epoch is None:
            self._current = self._new_iterator()
            self._seen = 0

    def epoch_ends(self, steps: int) -> None:
        if not self._called:
            return
        self._seen += int(steps)
        if self.num_batches and self._seen >= self.num_batches:
            # Keras makes the next iterator now; without steps_per_epoch the next epoch makes its own
            self._current = self._new_iterator()
            self._seen = 0

    def close(self) -> None:
        self._current = None
        super().close()


def _arrays_dataset(flow: ArrayBatches) -> tf.data.Dataset:
    """``flow``'s batches as a ``tf.data`` pipeline (no Python between steps): the arrays held once
    as tensors, each batch a gather of the indices Keras's own array adapter reads (its
    permutation of each iterator, drawn from its random stream: ``fit``'s order under one seed)."""
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
    order = keras_array_batch_indices(n, bs, flow.shuffle_mode)
    batches = tf.data.Dataset.zip((order, held))
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


def _no_batch_size(batch_size, what: str) -> None:
    if batch_size is not None:
        raise ValueError(f"batch_size applies to numpy arrays only; {what} is already batched. "
                         "Leave batch_size out.")
