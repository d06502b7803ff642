"""DummyConstantInput: constant random tensors; the speed ceiling of a model."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

from .base import InputSource

__all__ = ["DummyConstantInput"]


class DummyConstantInput(InputSource):
    """Every step gets the same random batch: measures the model without any input cost.

    Args:
        shapes: one full shape per input; needed when ``inputs()`` has unknown dims.

    Example::

        TrainConfig(model=M(), data=DummyConstantInput([[64, 28, 28, 1], [64]]), steps_per_epoch=100)
    """

    def __init__(self, shapes: Optional[Sequence[Sequence[int]]] = None):
        self.shapes = [list(s) for s in shapes] if shapes is not None else None
        self._values = None

    def _setup(self, specs):
        shapes = self.shapes
        if shapes is None:
            for s in specs:
                if not s.shape.is_fully_defined():
                    raise ValueError(f"DummyConstantInput: input '{s.name}' has shape {s.shape}; "
                                     "pass full shapes with DummyConstantInput(shapes=[...]).")
            shapes = [s.shape.as_list() for s in specs]
        if len(shapes) != len(specs):
            raise ValueError(f"DummyConstantInput: {len(shapes)} shapes given for {len(specs)} inputs")
        rng = np.random.RandomState(0)
        values = []
        for shp, s in zip(shapes, specs):
            if not s.shape.is_compatible_with(shp):
                raise ValueError(f"DummyConstantInput: shape {shp} does not fit input '{s.name}' {s.shape}")
            if s.dtype.is_floating:
                v = rng.rand(*shp)
            elif s.dtype.is_bool:
                v = rng.rand(*shp) > 0.5
            else:
                v = rng.randint(0, 2, size=shp)
            values.append(tf.constant(v, dtype=s.dtype))
        self._values = values

    def _get_input_tensors(self):
        return [tf.identity(v) for v in self._values]
