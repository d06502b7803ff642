"""TFDatasetInput: a ``tf.data.Dataset`` read in-graph through its iterator."""
from __future__ import annotations

import tensorflow as tf

from .base import InputSource, InputSourceError, spec_to_str

__all__ = ["TFDatasetInput"]


class TFDatasetInput(InputSource):
    """Use a ``tf.data.Dataset`` of batches (tuples in the order of ``inputs()``, or dicts keyed by name).

    The dataset is repeated forever (``repeat=True``); each replica takes its own batch per
    step. Give ``repeat=False`` for a dataset that never ends and must not be wrapped again,
    such as one ending in ``tf.data.experimental.prefetch_to_device`` (it must be the last
    transformation); such a dataset's end stops training with an error.

    Example::

        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).prefetch(2)
        TrainConfig(model=M(), data=TFDatasetInput(ds), steps_per_epoch=100, ...)
    """

    def __init__(self, dataset: tf.data.Dataset, repeat: bool = True):
        if not isinstance(dataset, tf.data.Dataset):
            raise TypeError(f"TFDatasetInput needs a tf.data.Dataset; got {type(dataset).__name__}")
        self.dataset = dataset
        self.repeat = bool(repeat)
        self._iterator = None

    def _setup(self, specs):
        elem = self.dataset.element_spec
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
        self._iterator = iter(self.dataset.repeat() if self.repeat else self.dataset)

    def raise_pending_error(self) -> None:
        # called when a step's read failed: without repeat, that is the dataset's end
        if not self.repeat:
            raise InputSourceError(
                "TFDatasetInput: the dataset ended while training needed more batches (repeat=False). "
                "Make it endless (.repeat() before prefetch_to_device) or train fewer steps.")

    def size(self) -> int:
        n = int(self.dataset.cardinality())
        if n < 0:
            raise NotImplementedError("the dataset's cardinality is unknown")
        return n

    def _get_input_tensors(self):
        elem = next(self._iterator)
        if self._keys is not None:
            elem = [elem[k] for k in self._keys]
        elif not isinstance(elem, (tuple, list)):
            elem = [elem]
        return self.set_shapes(list(elem))
