"""The InputSource protocol: how batches reach the traced training step.

An InputSource turns data (a DataFlow, a ``tf.data.Dataset``, constants) into the
tensors of one batch *inside* the traced step, so that no Python runs between
steps. The trainer uses it like this::

    source.setup(input_signature)      # eagerly, before tracing: queues, checks
    ... inside the traced step, once per replica:
    tensors = source.get_input_tensors()
    source.start(strategy)             # the fit loop, when training starts: producer threads
    source.close()                     # the fit loop, when training ends, however it ends

Its life belongs to the fit loop (``train/loop.py``); its callbacks (``get_callbacks``) only
report on it (the queue's fill level).

``FeedInput`` is the exception: it sets ``requires_feed`` and the trainer passes
``next_feed()`` as arguments of each call (one step per call; the slow baseline).

A source may also hand the train function values to read from at each call
(``call_inputs()``: the ``tf.data`` iterator of the current epoch, for Keras data read with
the iterators ``keras.Model.fit`` makes); the trainer passes them as arguments of the call
(no retrace while their types stay the same) and the traced step gives them back to
``get_input_tensors(*call_inputs)``.
"""
from __future__ import annotations

from typing import Optional, List, Sequence

import numpy as np
import tensorflow as tf

from ..callbacks.base import Callback
from ..utils.casting import cast_exactly

__all__ = ["InputSource", "InputCallbacks", "InputSourceError", "check_datapoint", "as_component_list",
           "spec_to_str"]


class InputCallbacks(list):
    """What :meth:`InputSource.setup` returns: the source's callbacks (reports on it), and the source itself (``.source``), so that a custom trainer that registers them knows which
    input it trains on."""

    def __init__(self, source: "InputSource"):
        super().__init__(source.get_callbacks())
        self.source = source


class InputSourceError(RuntimeError):
    """The data given to training does not fit the model's ``inputs()``, or it failed."""


def spec_to_str(spec: tf.TensorSpec) -> str:
    return f"TensorSpec(name={spec.name!r}, shape={tuple(spec.shape.as_list()) if spec.shape.rank is not None else None}, dtype={spec.dtype.name})"


def as_component_list(dp, specs: Sequence[tf.TensorSpec], where: str) -> list:
    """The datapoint's components in the order of ``specs`` (dict datapoints by spec name)."""
    if isinstance(dp, dict):
        missing = [s.name for s in specs if s.name not in dp]
        if missing:
            raise InputSourceError(
                f"{where}: the datapoint is a dict with keys {sorted(dp)} but inputs() needs "
                f"{missing}. Name the dict keys after the TensorSpec names.")
        return [dp[s.name] for s in specs]
    if not isinstance(dp, (list, tuple)):
        raise InputSourceError(
            f"{where}: a datapoint must be a list or a dict of components; got {type(dp).__name__}.")
    if len(dp) != len(specs):
        raise InputSourceError(
            f"{where}: the datapoint has {len(dp)} components but inputs() declares {len(specs)}: "
            f"{[s.name for s in specs]}. Make the DataFlow produce one component per input.")
    return list(dp)


def _channel_hint(got, declared: tf.TensorShape, index: int) -> str:
    """A hint when the only difference is a trailing channel axis of size 1 (e.g. MNIST's 28x28)."""
    if declared.rank is None:
        return ""
    dims = declared.as_list()
    if len(dims) == len(got) + 1 and dims[-1] == 1 and tf.TensorShape(dims[:-1]).is_compatible_with(got):
        return (" The declared input has a channel axis the data lacks: declare it without the last 1 and "
                "add the axis in build_graph (tf.expand_dims(x, -1)), or add it in the DataFlow: "
                f"MapDataComponent(df, lambda x: x[..., None], index={index}).")
    if len(got) == len(dims) + 1 and got[-1] == 1 and tf.TensorShape(dims).is_compatible_with(got[:-1]):
        return " The data has a trailing axis of size 1 that inputs() does not declare: declare it, or drop it."
    return ""


def _whole_floats_for_ints(arr: np.ndarray, want) -> bool:
    """True when ``arr`` holds floats for an integer dtype and every value is a whole number (the
    cast keeps every value; a fractional value stays a dtype error)."""
    want = np.dtype(want)
    if arr.dtype.kind != "f" or want.kind not in "iu" or arr.size == 0:
        return False
    with np.errstate(invalid="ignore"):
        return bool(np.all(np.isfinite(arr) & (arr == np.round(arr))))


def check_datapoint(dp, specs: Sequence[tf.TensorSpec], where: str) -> List[np.ndarray]:
    """Check a datapoint against the specs and return its components as numpy arrays.

    A component may be cast to the spec's dtype when numpy calls it a 'same_kind'
    cast (float64 -> float32, int64 -> int32), and floats to an integer input when every value is a
    whole number (HED's 0/1 float edge map for an int32 input: TF1's feed_dict cast it, as here);
    anything else is an error naming the input and both specs. A cast that would change a value (an int64 label outside the
    int32 range, an integer float32 cannot hold exactly, a float64 beyond float32's range)
    is an error naming the input, the value and where it is; float rounding is not.
    """
    comps = as_component_list(dp, specs, where)
    out = []
    for i, (c, spec) in enumerate(zip(comps, specs)):
        arr = np.asarray(c)
        want = spec.dtype.as_numpy_dtype
        shape = spec.shape
        problem = None
        if shape.rank is not None and arr.ndim != shape.rank:
            problem = f"rank {arr.ndim}"
        elif shape.rank is not None and not shape.is_compatible_with(arr.shape):
            problem = "shape"
        elif arr.dtype != want and not np.can_cast(arr.dtype, want, casting="same_kind") \
                and not _whole_floats_for_ints(arr, want):
            problem = "dtype"
        if problem:
            raise InputSourceError(
                f"{where}: input '{spec.name}' (component {i}) does not match inputs(): wrong {problem}. "
                f"The data gives shape {arr.shape} dtype {arr.dtype}; inputs() declares "
                f"{spec_to_str(spec)}. Fix the DataFlow (e.g. BatchData, a cast in MapData) or inputs()."
                + _channel_hint(arr.shape, shape, i))
        if arr.dtype != want:
            arr = cast_exactly(arr, want, f"{where}: input '{spec.name}' (component {i})", InputSourceError)
        out.append(arr)
    return out


class InputSource:
    """Base class of input sources. Subclasses implement the underscore methods."""

    requires_feed = False
    _setup_done = False
    #: samples in one batch of this source (one tower's), when known after setup();
    #: ThroughputTracker reports samples per second with it
    batch_size: Optional[int] = None

    def setup(self, input_signature: Sequence[tf.TensorSpec]) -> "InputCallbacks":
        """Create queues/iterators and check the data against the signature (eager).

        Returns the source's callbacks (as tensorpack's did, for a custom trainer's
        ``self.register_callback(input.setup(...))``); a trainer adds them itself otherwise."""
        if self._setup_done:
            raise RuntimeError(f"{type(self).__name__}.setup() was already called; "
                               "an InputSource serves one trainer.")
        self.input_signature = list(input_signature)
        self._setup(self.input_signature)
        self._setup_done = True
        return InputCallbacks(self)

    def get_input_tensors(self, *call_inputs) -> list:
        """The tensors of one batch; called inside the traced step, once per replica, with the
        call's :meth:`call_inputs` (as the traced function received them)."""
        return self._get_input_tensors(*call_inputs)

    def call_inputs(self) -> list:
        """Values the trainer passes to the train function at each call, for
        :meth:`get_input_tensors` to read from (none by default)."""
        return []

    def get_callbacks(self) -> List[Callback]:
        """Callbacks that report on the source while it trains (its queue's fill level)."""
        return []

    def start(self, strategy: Optional[tf.distribute.Strategy] = None) -> None:
        """Start producing batches (threads) for the replicas of ``strategy``; the fit loop calls it
        when training starts, and :meth:`close` when it ends. Safe to call more than once."""

    def size(self) -> int:
        """Batches in one pass of the data; NotImplementedError when unknown."""
        raise NotImplementedError(f"{type(self).__name__} does not know its size")

    def close(self) -> None:
        """Stop threads and release resources. Safe to call more than once."""

    def raise_pending_error(self) -> None:
        """Re-raise an error from a producer thread, if any (called when a step fails)."""

    def cancel(self) -> None:
        """Make a step that waits for data fail now (called from the interrupt watcher thread
        on Ctrl-C; must not block). Sources whose steps cannot wait do nothing."""

    def fill_level(self) -> Optional[int]:
        """Batches ready for the next steps, or None when the source does not know."""
        return None

    def set_shapes(self, tensors) -> list:
        """Give dequeued tensors the static shapes of the signature."""
        for t, spec in zip(tensors, self.input_signature):
            t.set_shape(spec.shape)
        return list(tensors)

    def _setup(self, input_signature):
        pass

    def _get_input_tensors(self):
        raise NotImplementedError
