"""Input sources of tensors made in-graph: :class:`TensorInput` (a function gives the batch's
tensors), :class:`FeedfreeInput` (tensorpack's base of the sources that need no feeding), and
``PlaceholderInput`` (raises: TF2 has no placeholders)."""
from __future__ import annotations

from typing import Callable, List, Optional

from ..utils.tf1_only import tf1_only_class
from .base import InputSource

__all__ = ["FeedfreeInput", "TensorInput", "PlaceholderInput"]


class FeedfreeInput(InputSource):
    """Base class of input sources whose batches come in-graph, with nothing fed per step (every
    kerastrainer source but ``FeedInput``). Subclass it as tensorpack's: implement
    ``_get_input_tensors()`` (and ``_setup(input_signature)``, ``size()``).

    Example::

        class Constant(FeedfreeInput):
            def _get_input_tensors(self):
                return [tf.zeros([8, 28, 28]), tf.zeros([8], tf.int32)]
    """

    requires_feed = False


class TensorInput(FeedfreeInput):
    """Batches from ``get_tensor_fn()``, called inside the traced step once per replica; it returns
    the list of tensors of one batch, in the order of ``inputs()`` (e.g. from an op that reads a
    file or a tf.data iterator made outside).

    Args:
        get_tensor_fn: () -> list of tensors.
        size: batches in one epoch (else ``steps_per_epoch`` must be given).

    Example::

        it = iter(dataset)
        TensorInput(lambda: list(next(it)), size=1000)
    """

    def __init__(self, get_tensor_fn: Callable[[], List], size: Optional[int] = None):
        if not callable(get_tensor_fn):
            raise TypeError(f"TensorInput: get_tensor_fn must be a function, got {type(get_tensor_fn).__name__}")
        if size is not None and int(size) <= 0:
            raise ValueError(f"TensorInput: size must be positive, got {size}")
        self.get_tensor_fn = get_tensor_fn
        self._fixed_size = None if size is None else int(size)

    def size(self) -> int:
        if self._fixed_size is None:
            raise NotImplementedError("TensorInput was given no size: pass size= or steps_per_epoch")
        return self._fixed_size

    def _get_input_tensors(self):
        tensors = self.get_tensor_fn()
        if not isinstance(tensors, (list, tuple)):
            tensors = [tensors]
        if len(tensors) != len(self.input_signature):
            raise ValueError(f"TensorInput: get_tensor_fn returned {len(tensors)} tensors, the input "
                             f"signature has {len(self.input_signature)}")
        return self.set_shapes(list(tensors))


PlaceholderInput = tf1_only_class(
    "PlaceholderInput", __name__, "there are no placeholders to feed",
    "Use FeedInput(dataflow) to feed batches from Python each step, or QueueInput(dataflow) "
    "(the default) for in-graph input.", base=InputSource)
