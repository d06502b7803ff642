"""TFDatasetInput: a ``tf.data.Dataset`` (or a DataFlow made into one) read in-graph through its
iterator."""
from __future__ import annotations

import threading
from typing import Optional, Sequence

import tensorflow as tf

from ..dataflow.base import check_dataflow
from ..dataflow.common import MapData
from .base import InputSource, InputSourceError, spec_to_str

__all__ = ["TFDatasetInput"]


class TFDatasetInput(InputSource):
    """Use a ``tf.data.Dataset`` of batches (tuples in the order of ``inputs()``, or dicts keyed by name),
    or a DataFlow of batches made into one (:meth:`dataflow_to_dataset`, with the dtypes of ``inputs()``).

    The dataset is repeated forever (``repeat=True``); each replica takes its own batch per
    step. Give ``repeat=False`` for a dataset that never ends and must not be wrapped again,
    such as one ending in ``tf.data.experimental.prefetch_to_device`` (it must be the last
    transformation); such a dataset's end stops training with an error.

    Example::

        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).prefetch(2)
        TrainConfig(model=M(), data=TFDatasetInput(ds), steps_per_epoch=100, ...)
        TrainConfig(model=M(), data=TFDatasetInput(BatchData(df, 64)), ...)   # a DataFlow
    """

    #: the iterator is made at setup (a dataset that cannot be iterated fails there); a subclass
    #: that makes its iterators later (one per epoch) sets False
    iterate_at_setup = True

    def __init__(self, dataset, repeat: bool = True):
        self._dataflow = None
        if isinstance(dataset, tf.data.Dataset):
            self.dataset: Optional[tf.data.Dataset] = dataset
        else:
            self._dataflow = check_dataflow(dataset, "TFDatasetInput: the input (a tf.data.Dataset or a DataFlow)")
            self.dataset = None   # made at setup, with the dtypes of inputs()
        self.repeat = bool(repeat)
        self._iterator = None
        self._iterator_lock = threading.Lock()   # (replicas trace in threads of their own)

    @staticmethod
    def dataflow_to_dataset(df, types: Sequence[tf.DType]) -> tf.data.Dataset:
        """A ``tf.data.Dataset`` of the DataFlow's datapoints (lists), one component per dtype in
        ``types``, as tensorpack's: the DataFlow is reset here, and the dataset is as finite as the
        DataFlow (add ``.repeat()`` to train on it for more than one pass).

        Example::

            ds = TFDatasetInput.dataflow_to_dataset(BatchData(df, 32), [tf.float32, tf.int32])
        """
        df = check_dataflow(df, "TFDatasetInput.dataflow_to_dataset")
        if not isinstance(types, (list, tuple)) or not types:
            raise TypeError(f"TFDatasetInput.dataflow_to_dataset: types must be a non-empty list of dtypes, "
                            f"one per component; got {types!r}")
        types = [tf.as_dtype(t) for t in types]
        df = MapData(df, tuple)
        df.reset_state()
        return tf.data.Dataset.from_generator(
            df.__iter__, output_signature=tuple(tf.TensorSpec(None, t) for t in types))

    def make_dataset(self, specs: Sequence[tf.TensorSpec]) -> tf.data.Dataset:
        """The dataset of one pass (not repeated), for the signature ``specs``."""
        if self.dataset is None:
            self.dataset = self.dataflow_to_dataset(self._dataflow, [s.dtype for s in specs])
        return self.dataset

    def _setup(self, specs):
        elem = self.make_dataset(specs).element_spec
        if isinstance(elem, dict):
            missing = [s.name for s in specs if s.name not in elem]
            if missing:
                raise InputSourceError(f"TFDatasetInput: the dataset's dict elements have keys {sorted(elem)}, "
                                       f"inputs() needs {missing}.")
            elem = [elem[s.name] for s in specs]
            self._keys = [s.name for s in specs]
        else:
            elem = list(elem) if isinstance(elem, (tuple, list)) else [elem]
            self._keys = None
            if len(elem) != len(specs):
                raise InputSourceError(f"TFDatasetInput: the dataset's elements have {len(elem)} components "
                                       f"but inputs() declares {len(specs)}: {[s.name for s in specs]}.")
        for e, s in zip(elem, specs):
            if e.dtype != s.dtype or not s.shape.is_compatible_with(e.shape):
                raise InputSourceError(
                    f"TFDatasetInput: input '{s.name}' does not match inputs(): the dataset gives "
                    f"shape {e.shape} dtype {e.dtype.name}; inputs() declares {spec_to_str(s)}.")
        self._iterator = self._new_iterator() if self.iterate_at_setup else None

    def _new_iterator(self):
        return iter(self.dataset.repeat() if self.repeat else self.dataset)

    def raise_pending_error(self) -> None:
        # called when a step's read failed: without repeat, that is the dataset's end
        if not self.repeat:
            raise InputSourceError(
                "TFDatasetInput: the dataset ended while training needed more batches (repeat=False). "
                "Make it endless (.repeat() before prefetch_to_device) or train fewer steps.")

    def size(self) -> int:
        if self._dataflow is not None:
            return len(self._dataflow)
        n = int(self.dataset.cardinality())
        if n < 0:
            raise NotImplementedError("the dataset's cardinality is unknown")
        return n

    def _get_input_tensors(self, iterator=None):
        # iterator: the call's own (a subclass's call_inputs), else the one made at setup
        if iterator is None:
            with self._iterator_lock:
                if self._iterator is None:
                    self._iterator = self._new_iterator()
                iterator = self._iterator
        elem = next(iterator)
        if self._keys is not None:
            elem = [elem[k] for k in self._keys]
        elif not isinstance(elem, (tuple, list)):
            elem = [elem]
        return self.set_shapes(list(elem))
