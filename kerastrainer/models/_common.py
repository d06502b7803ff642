"""Argument normalisation shared by the built-in layers (data format, padding, ...)."""
from __future__ import annotations

from typing import Callable, Optional, Sequence, Union

import keras
import tensorflow as tf

from ..utils.devices import current_device, device_type

__all__ = []  # internal helpers


def data_format(value: str, layer: str) -> str:
    """'NHWC'/'channels_last' -> 'channels_last'; 'NCHW'/'channels_first' -> 'channels_first'."""
    v = str(value)
    if v in ("channels_last", "NHWC", "NWC", "NDHWC"):
        return "channels_last"
    if v in ("channels_first", "NCHW", "NCW", "NCDHW"):
        return "channels_first"
    raise ValueError(f"{layer}: data_format must be 'channels_last' (NHWC) or 'channels_first' "
                     f"(NCHW), got {value!r}.")


def padding(value: str, layer: str) -> str:
    v = str(value).lower()
    if v not in ("same", "valid"):
        raise ValueError(f"{layer}: padding must be 'same' or 'valid', got {value!r}.")
    return v


def pair(value: Union[int, Sequence[int]], what: str, layer: str) -> tuple:
    """An int or a pair of ints -> a pair of ints (kernel sizes, strides)."""
    if isinstance(value, (list, tuple)):
        if len(value) != 2:
            raise ValueError(f"{layer}: {what} must be an int or two ints, got {value!r}.")
        return tuple(int(v) for v in value)
    if value is None:
        raise ValueError(f"{layer}: {what} is required.")
    return (int(value), int(value))


def initializer(value, default):
    """Keras initializer from an object, a name or None (the layer's default)."""
    if value is None:
        return default
    return keras.initializers.get(value) if isinstance(value, (str, dict)) else value


def apply_activation(x, activation: Optional[Union[str, Callable]]):
    """Apply ``activation`` (None, a Keras name or a callable, e.g. ``BNReLU``)."""
    if activation is None:
        return x
    if isinstance(activation, str):
        activation = keras.activations.get(activation)
    return activation(x)


def channel_axis(fmt: str, ndim: int) -> int:
    return 1 if fmt == "channels_first" and ndim > 2 else ndim - 1


def static_rank(x, layer: str) -> int:
    rank = x.shape.rank if hasattr(x.shape, "rank") else len(x.shape)
    if rank is None:
        raise ValueError(f"{layer}: the input's rank must be known when the layer is built.")
    return rank


def output(x, name: str = "output"):
    """Name the layer's output op, as tensorpack does (``conv0/output``)."""
    return tf.identity(x, name=name)


def nchw_kernels_here(x) -> bool:
    """Whether an op on ``x`` runs on a GPU, where TensorFlow has NCHW convolution and pooling
    kernels. CPUs have them only with oneDNN, and not all of them (eager NCHW max-pool
    gradients fail there too), so on CPUs the layers always run NHWC between transposes."""
    # eager: the op runs where its input is; traced: where the device scope says
    device = (getattr(x, "device", "") if tf.executing_eagerly() else "") or current_device()
    return device_type(device) == "GPU"


def to_nhwc(x):
    return tf.transpose(x, [0, 2, 3, 1])


def to_nchw(x):
    return tf.transpose(x, [0, 3, 1, 2])
