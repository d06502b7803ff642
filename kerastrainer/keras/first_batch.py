"""What the first batch of the data tells ``KerasModel`` before it trains: inputs apart from
targets (:func:`split_xy`), one sample to build and probe the model on (:func:`probe_batch`), the
outputs' names, and the ``keras.Input`` s of tensorpack's ``get_model(*inputs)`` contract.

Left to others: what the data becomes (:mod:`.data`), the model's flat signature (:mod:`.structure`).

Example::

    x, y = split_xy(data.first)                 # ((x, y) pairs, flat lists, x alone)
    y_pred = model(probe_batch(x, io, data), training=False)
    names, kind = output_names(model, y_pred)
"""
from __future__ import annotations

import inspect
from typing import List, Optional

import keras
import numpy as np
import tensorflow as tf

from ..utils import logger
from .data import KerasData, SpecSample
from .structure import KerasSignatureError, ModelIO

__all__ = ["first_sample_batch", "probe_batch", "split_xy", "without_weights", "output_names", "takes_inputs",
           "keras_inputs", "zeros_like_specs"]


def first_sample_batch(struct):
    """The first sample of every array of a batch, keeping the batch axis."""
    if isinstance(struct, dict):
        return {k: first_sample_batch(v) for k, v in struct.items()}
    if isinstance(struct, (list, tuple)):
        return [first_sample_batch(v) for v in struct]
    arr = np.asarray(struct)
    if arr.dtype == np.float64:
        arr = arr.astype(np.float32)
    return arr[:1]


def probe_batch(x, check: ModelIO, data: Optional[KerasData]):
    """One sample of ``x`` to call the model on. A dataset's stand-in (:class:`SpecSample`) with
    unknown sizes takes them from the model's declared inputs; a model without declared inputs is
    probed on the dataset's first batch, read for it (a shuffled pipeline's first reshuffle then
    goes to it, with a log line)."""
    leaves = tf.nest.flatten(x)
    if not any(isinstance(v, SpecSample) and None in v.shape[1:] for v in leaves):
        return first_sample_batch(x)
    specs = check.input_specs
    if all(s.shape.rank is not None and None not in s.shape.as_list()[1:] for s in specs):
        return check.pack_inputs([np.zeros([1] + s.shape.as_list()[1:], s.dtype.as_numpy_dtype) for s in specs])
    logger.info("KerasModel: the data's sizes %s are unknown and the model declares none: its first batch is "
                "read to build the model (a shuffled tf.data pipeline's first reshuffle goes to it).",
                [v.shape for v in leaves if isinstance(v, SpecSample)])
    first = _map_numpy(next(iter(data.source.take(1))))
    hint = len(check.input_specs)
    return first_sample_batch(split_xy(without_weights(first, None, hint), hint)[0])


def _map_numpy(struct):
    return tf.nest.map_structure(lambda t: t.numpy(), struct)


def split_xy(first, n_inputs_hint: Optional[int] = None):
    """``(x, y)`` of a first datapoint that is ``(x, y)``, a flat list (``n_inputs_hint`` inputs),
    or ``x`` alone (``(x,)`` or an array: y is None, for a model whose loss is its ``add_loss``).

    Example::

        split_xy((x, y))   # (x, y)
        split_xy((x,))     # (x, None)
    """
    if isinstance(first, (list, tuple)) and len(first) == 2:
        return first[0], first[1]
    if isinstance(first, (list, tuple)) and len(first) == 1:
        return first[0], None
    if not isinstance(first, (list, tuple, dict)):
        return first, None
    if isinstance(first, (list, tuple)) and n_inputs_hint is not None and len(first) > n_inputs_hint:
        x = first[:n_inputs_hint]
        y = first[n_inputs_hint:]
        return (x[0] if len(x) == 1 else list(x)), (y[0] if len(y) == 1 else list(y))
    raise KerasSignatureError(
        f"Cannot tell inputs from targets in a datapoint of {len(first) if hasattr(first, '__len__') else '?'} "
        "components: give (x, y) pairs, or a model whose inputs are declared (keras.Input) so that a flat "
        "[inputs..., targets...] list can be split.")


def without_weights(first, model: keras.Model, n_inputs: Optional[int]):
    """A first datapoint without its sample weights: a tuple ``(x, y, sample_weight)`` (Keras's
    form) becomes ``(x, y)``; a flat ``[inputs..., targets...]`` of three is left as it is."""
    if not (isinstance(first, tuple) and len(first) == 3):
        return first
    try:
        n_out = len(model.outputs) if getattr(model, "built", False) and model.outputs else None
    except (AttributeError, ValueError):
        n_out = None
    flat = not any(isinstance(c, (list, tuple, dict)) for c in first) and n_inputs is not None \
        and n_out is not None and n_inputs + n_out == 3
    return first if flat else first[:2]


def output_names(model: keras.Model, y_pred) -> (List[str], str):
    if isinstance(y_pred, dict):
        return list(y_pred), "dict"
    if isinstance(y_pred, (list, tuple)):
        names = list(getattr(model, "output_names", None) or [])
        if len(names) != len(y_pred) or len(set(names)) != len(names):
            names = [f"output_{i}" for i in range(len(y_pred))]
        return names, "list"
    names = list(getattr(model, "output_names", None) or [])
    return ([names[0]] if len(names) == 1 else ["output"]), "single"


def takes_inputs(fn) -> bool:
    """Whether ``get_model`` takes the input tensors (tensorpack's contract) rather than nothing."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind == p.VAR_POSITIONAL or (p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                                              and p.default is p.empty) for p in params)


def keras_inputs(specs: List[tf.TensorSpec]) -> list:
    """One ``keras.Input`` per spec (the batch axis left out), named after the spec."""
    out = []
    for i, s in enumerate(specs):
        shape = tf.TensorShape(s.shape)
        if shape.rank is None or shape.rank < 1:
            raise KerasSignatureError(f"input_signature[{i}] has shape {shape}; a Keras input needs a batch axis "
                                      "first, e.g. tf.TensorSpec([None, 28, 28, 1], tf.float32, 'image').")
        out.append(keras.Input(shape=tuple(shape.as_list()[1:]), dtype=s.dtype.name, name=s.name or None))
    return out


def zeros_like_specs(specs: List[tf.TensorSpec]):
    """A one-sample batch of zeros per spec (unknown sizes become 1): a stand-in first datapoint."""
    arrays = [np.zeros([1] + [d if d is not None else 1 for d in tf.TensorShape(s.shape).as_list()[1:]],
                       dtype=s.dtype.as_numpy_dtype) for s in specs]
    return arrays[0] if len(arrays) == 1 else arrays
