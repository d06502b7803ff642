"""``ModelDesc.inputs()`` read as named ``tf.TensorSpec``s, in each form tensorpack accepted.

``inputs()`` may return, as in tensorpack 0.11:

- ``tf.TensorSpec(shape, dtype, name)`` (the current form);
- ``tf.compat.v1.placeholder(dtype, shape, name)`` (tensorpack's older, common form): read as its
  spec (shape, dtype, the op's name). ``inputs()`` is called inside a graph of its own, as tensorpack
  did, so placeholders work in an eager program and never land in a graph-mode program's graph;
- tensorpack's ``InputDesc(type, shape, name)`` (a namedtuple before tensorpack 0.9.9, which made it
  a ``tf.TensorSpec``): read field by field.

Example::

    class Model(ModelDesc):
        def inputs(self):
            return [tf.compat.v1.placeholder(tf.float32, (None, 28, 28), 'input'),
                    tf.compat.v1.placeholder(tf.int32, (None,), 'label')]

    Model().get_input_signature()   # [TensorSpec((None, 28, 28), tf.float32, 'input'), ...]
"""
from __future__ import annotations

from typing import Callable, List

import tensorflow as tf

__all__ = ["read_input_signature"]

_PLACEHOLDER_OPS = ("Placeholder", "PlaceholderWithDefault")


def _spec_of(item, i: int, owner: str) -> tf.TensorSpec:
    if isinstance(item, tf.TensorSpec):
        return item
    if isinstance(item, tf.Tensor) and hasattr(item, "op"):   # a graph tensor
        if item.op.type not in _PLACEHOLDER_OPS:
            raise TypeError(f"{owner}.inputs()[{i}] is the tensor {item.name} made by a {item.op.type} op; "
                            "return tf.TensorSpec(shape, dtype, name) or a tf.compat.v1.placeholder.")
        return tf.TensorSpec(item.shape, item.dtype, name=item.op.name)
    if isinstance(getattr(item, "type", None), tf.DType) and hasattr(item, "shape") and hasattr(item, "name"):
        return tf.TensorSpec(item.shape, item.type, name=item.name)   # tensorpack's InputDesc
    raise TypeError(f"{owner}.inputs()[{i}] is a {type(item).__name__}; return tf.TensorSpec(shape, dtype, name) "
                    "(or a tf.compat.v1.placeholder, as in tensorpack).")


def read_input_signature(inputs: Callable[[], list], owner: str) -> List[tf.TensorSpec]:
    """Call ``inputs`` (a ModelDesc's ``inputs``; ``owner`` names its class in errors) and return its
    named, uniquely named ``tf.TensorSpec``s."""
    with tf.Graph().as_default():   # placeholders made by inputs() go to a graph of their own
        items = inputs()
    if isinstance(items, (tf.TensorSpec, tf.Tensor, str)) or not hasattr(items, "__iter__"):
        raise TypeError(f"{owner}.inputs() returned a {type(items).__name__}; return a list of tf.TensorSpec.")
    items = list(items)
    if not items:
        raise ValueError(f"{owner}.inputs() returned no TensorSpec")
    specs = [_spec_of(item, i, owner) for i, item in enumerate(items)]
    for i, s in enumerate(specs):
        if not s.name:
            raise ValueError(f"{owner}.inputs()[{i}] has no name; give every TensorSpec a name (it is how "
                             "predictors find inputs).")
    names = [s.name for s in specs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"{owner}.inputs() has duplicate names {dup}")
    return specs
