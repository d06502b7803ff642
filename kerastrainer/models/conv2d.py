"""``Conv2D`` and ``Conv2DTranspose``: tensorpack's convolution layers on Keras 3.

Variables: ``<name>/W`` (kernel, HWIO) and ``<name>/b``. The activation runs inside
the layer's scope, so ``activation=BNReLU`` makes ``<name>/bn/gamma`` ..., as in
tensorpack. The output op is named ``<name>/output``.

``data_format='channels_first'`` runs NCHW kernels on GPUs and, on CPUs, the NHWC kernels
between two transposes: the same variables and results.

Example::

    x = Conv2D('conv0', image, 32, 3, activation=tf.nn.relu)
    x = Conv2D('conv1', x, filters=64, kernel_size=3, strides=2, activation=BNReLU)
    y = Conv2DTranspose('up0', x, 32, 4, strides=2)
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence, Union

import keras
import tensorflow as tf
from keras import ops

from . import _common as C
from .registry import get_layer_here, layer_register, legacy_names

__all__ = ["Conv2D", "Conv2DTranspose", "Deconv2D"]

_WB = {"kernel": "W", "bias": "b"}


def _finish_channels_first(layer, inputs, conv):
    """``conv(x, data_format)`` plus the layer's bias and activation, for ``channels_first`` inputs:
    NCHW where TensorFlow has the kernels, else NHWC between two transposes. The bias goes in
    with ``tf.nn.bias_add`` and an explicit format: Keras 3.15's ``ops.add`` guesses the channel
    axis of an NCHW tensor from its sizes, and when the width equals the channel count it adds
    the bias along the width."""
    if C.nchw_kernels_here(inputs):
        x = conv(inputs, "channels_first")
        if layer.use_bias:
            x = tf.nn.bias_add(x, layer.bias, data_format="NCHW")
    else:
        x = conv(C.to_nhwc(inputs), "channels_last")
        if layer.use_bias:
            x = tf.nn.bias_add(x, layer.bias)
        x = C.to_nchw(x)
    return layer.activation(x) if layer.activation is not None else x


@keras.saving.register_keras_serializable(package="kerastrainer")
class NCHWConv2D(keras.layers.Conv2D):
    """``keras.layers.Conv2D`` whose ``channels_first`` form also runs on CPUs without NCHW
    kernels, and adds its bias along the channel axis whatever the sizes."""

    def call(self, inputs):
        if self.data_format == "channels_last":
            return super().call(inputs)
        return _finish_channels_first(self, inputs, lambda x, fmt: ops.conv(
            x, self.kernel, strides=list(self.strides), padding=self.padding, dilation_rate=self.dilation_rate,
            data_format=fmt))


@keras.saving.register_keras_serializable(package="kerastrainer")
class NCHWConv2DTranspose(keras.layers.Conv2DTranspose):
    """``keras.layers.Conv2DTranspose`` with the same ``channels_first`` care as :class:`NCHWConv2D`."""

    def call(self, inputs):
        if self.data_format == "channels_last":
            return super().call(inputs)
        return _finish_channels_first(self, inputs, lambda x, fmt: ops.conv_transpose(
            x, self.kernel, strides=list(self.strides), padding=self.padding, output_padding=self.output_padding,
            dilation_rate=self.dilation_rate, data_format=fmt))


def default_kernel_initializer():
    """tensorpack's default: He-normal (variance scaling 2.0, fan-in, not truncated)."""
    return keras.initializers.VarianceScaling(2.0, mode="fan_in", distribution="untruncated_normal")


@layer_register(log_shape=True)
@legacy_names(out_channel="filters", kernel_shape="kernel_size", stride="strides",
              nl="activation", W_init="kernel_initializer", b_init="bias_initializer",
              split="groups")
def Conv2D(inputs, filters: Optional[int] = None, kernel_size: Union[int, Sequence[int], None] = None,
           strides: Union[int, Sequence[int]] = (1, 1), padding: str = "same",
           data_format: str = "channels_last", dilation_rate: Union[int, Sequence[int]] = (1, 1),
           activation: Optional[Union[str, Callable]] = None, use_bias: bool = True,
           kernel_initializer=None, bias_initializer="zeros", kernel_regularizer=None,
           bias_regularizer=None, groups: int = 1):
    """2-D convolution. ``Conv2D('name', x, filters, kernel_size, strides=1, ...)``.

    tensorpack's names are accepted too: ``out_channel``, ``kernel_shape``, ``stride``,
    ``nl``, ``W_init``, ``b_init``, ``split`` (= ``groups``).

    Example::

        x = Conv2D('conv0', x, 64, 3, strides=2, activation=BNReLU)
    """
    if filters is None:
        raise TypeError("Conv2D: filters (tensorpack: out_channel) is required, e.g. Conv2D('conv0', x, 32, 3).")
    fmt = C.data_format(data_format, "Conv2D")
    ksize = C.pair(kernel_size, "kernel_size (tensorpack: kernel_shape)", "Conv2D")
    layer = get_layer_here(lambda kname: NCHWConv2D(
        int(filters), ksize, strides=C.pair(strides, "strides", "Conv2D"),
        padding=C.padding(padding, "Conv2D"), data_format=fmt,
        dilation_rate=C.pair(dilation_rate, "dilation_rate", "Conv2D"), groups=int(groups),
        use_bias=use_bias, kernel_initializer=C.initializer(kernel_initializer, default_kernel_initializer()),
        bias_initializer=C.initializer(bias_initializer, "zeros"), kernel_regularizer=kernel_regularizer,
        bias_regularizer=bias_regularizer, name=kname), _WB)
    x = layer(inputs)
    return C.output(C.apply_activation(x, activation))


@layer_register(log_shape=True)
@legacy_names(out_channel="filters", kernel_shape="kernel_size", stride="strides",
              nl="activation", W_init="kernel_initializer", b_init="bias_initializer")
def Conv2DTranspose(inputs, filters: Optional[int] = None,
                    kernel_size: Union[int, Sequence[int], None] = None,
                    strides: Union[int, Sequence[int]] = (1, 1), padding: str = "same",
                    data_format: str = "channels_last",
                    activation: Optional[Union[str, Callable]] = None, use_bias: bool = True,
                    kernel_initializer=None, bias_initializer="zeros", kernel_regularizer=None,
                    bias_regularizer=None):
    """Transposed 2-D convolution (``Deconv2D``). Kernel ``W`` has shape (kh, kw, out, in).

    Example::

        up = Conv2DTranspose('up0', x, 32, 4, strides=2)     # doubles H and W
    """
    if filters is None:
        raise TypeError("Conv2DTranspose: filters (tensorpack: out_channel) is required.")
    fmt = C.data_format(data_format, "Conv2DTranspose")
    ksize = C.pair(kernel_size, "kernel_size (tensorpack: kernel_shape)", "Conv2DTranspose")
    layer = get_layer_here(lambda kname: NCHWConv2DTranspose(
        int(filters), ksize, strides=C.pair(strides, "strides", "Conv2DTranspose"),
        padding=C.padding(padding, "Conv2DTranspose"), data_format=fmt, use_bias=use_bias,
        kernel_initializer=C.initializer(kernel_initializer, default_kernel_initializer()),
        bias_initializer=C.initializer(bias_initializer, "zeros"), kernel_regularizer=kernel_regularizer,
        bias_regularizer=bias_regularizer, name=kname), _WB)
    x = layer(inputs)
    return C.output(C.apply_activation(x, activation))


Deconv2D = Conv2DTranspose
