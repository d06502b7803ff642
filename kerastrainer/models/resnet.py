"""ResNet-18/34/50/101/152, built from the functional layers (tensorpack's variant).

- bottleneck blocks put the stride on the 3x3 conv (ResNet v1.5, fb.resnet.torch);
- every conv is bias-free and followed by BatchNorm; the last BatchNorm of each
  residual branch starts with gamma = 0, so each block starts as the identity;
- a projection shortcut (1x1 conv + BN) only where the channel count changes;
- ``mode='preact'`` builds the pre-activation ResNet (v2) instead.

Variable names follow tensorpack's ImageNet example (``conv0/W``,
``group0/block0/conv1/bn/gamma``, ``linear/W`` ...).

Parameters (trainable, 1000 classes), equal to the standard models'
(torchvision/Keras without conv biases):

======  ===========  ===================
depth   block        trainable params
======  ===========  ===================
18      basic        11,689,512
34      basic        21,797,672
50      bottleneck   25,557,032
101     bottleneck   44,549,160
152     bottleneck   60,192,808
======  ===========  ===================

Example::

    def build_graph(self, image, label):
        logits = resnet(image, depth=50, num_classes=1000)
        ...
"""
from __future__ import annotations

from typing import Callable, Dict, Sequence, Tuple

import keras
import tensorflow as tf

from ..lms.blocks import lms_block
from .arg_scope import argscope, get_arg_scope
from .batch_norm import BatchNorm, BNReLU
from .conv2d import Conv2D
from .fc import FullyConnected
from .pool import GlobalAvgPooling, MaxPooling

__all__ = ["resnet", "resnet_backbone", "resnet_stem", "resnet_group", "preact_group", "resnet_basicblock",
           "resnet_bottleneck", "preact_basicblock", "preact_bottleneck", "resnet_shortcut",
           "RESNET_CONFIGS"]

#: depth -> (blocks per group, plain block, pre-activation block)
RESNET_CONFIGS: Dict[int, Tuple[Sequence[int], str]] = {
    18: ((2, 2, 2, 2), "basic"),
    34: ((3, 4, 6, 3), "basic"),
    50: ((3, 4, 6, 3), "bottleneck"),
    101: ((3, 4, 23, 3), "bottleneck"),
    152: ((3, 8, 36, 3), "bottleneck"),
}


def _channels(x) -> int:
    fmt = get_arg_scope()["Conv2D"].get("data_format", "channels_last")
    axis = 1 if fmt in ("channels_first", "NCHW") else -1
    return int(x.shape[axis])


def _bn(zero_init: bool = False) -> Callable:
    """An activation for Conv2D: BatchNorm('bn'), gamma starting at 0 or 1."""
    init = "zeros" if zero_init else "ones"
    return lambda x: BatchNorm("bn", x, gamma_initializer=init)


def resnet_shortcut(x, channels: int, stride: int, activation: Callable = None):
    """The identity, or a 1x1 projection ``convshortcut`` where the channel count changes."""
    if _channels(x) == channels:
        return x
    return Conv2D("convshortcut", x, channels, 1, strides=stride, activation=activation)


def resnet_basicblock(x, channels: int, stride: int):
    """Two 3x3 convs; ReLU after the sum."""
    shortcut = x
    x = Conv2D("conv1", x, channels, 3, strides=stride, activation=BNReLU)
    x = Conv2D("conv2", x, channels, 3, activation=_bn(zero_init=True))
    return tf.nn.relu(x + resnet_shortcut(shortcut, channels, stride, activation=_bn()))


def resnet_bottleneck(x, channels: int, stride: int):
    """1x1 -> 3x3 (strided) -> 1x1 with 4x channels; ReLU after the sum."""
    shortcut = x
    x = Conv2D("conv1", x, channels, 1, activation=BNReLU)
    x = Conv2D("conv2", x, channels, 3, strides=stride, activation=BNReLU)
    x = Conv2D("conv3", x, channels * 4, 1, activation=_bn(zero_init=True))
    return tf.nn.relu(x + resnet_shortcut(shortcut, channels * 4, stride, activation=_bn()))


def _preactivate(x, preact: bool):
    # The first block of a group gets an already activated input.
    return BNReLU("preact", x) if preact else x


def preact_basicblock(x, channels: int, stride: int, preact: bool):
    """Pre-activation basic block: (BN-ReLU) -> 3x3 -> BN-ReLU -> 3x3, plus the shortcut."""
    shortcut = x
    x = _preactivate(x, preact)
    x = Conv2D("conv1", x, channels, 3, strides=stride, activation=BNReLU)
    x = Conv2D("conv2", x, channels, 3)
    return x + resnet_shortcut(shortcut, channels, stride)


def preact_bottleneck(x, channels: int, stride: int, preact: bool):
    """Pre-activation bottleneck: (BN-ReLU) -> 1x1 -> 3x3 (strided) -> 1x1, plus the shortcut."""
    shortcut = x
    x = _preactivate(x, preact)
    x = Conv2D("conv1", x, channels, 1, activation=BNReLU)
    x = Conv2D("conv2", x, channels, 3, strides=stride, activation=BNReLU)
    x = Conv2D("conv3", x, channels * 4, 1)
    return x + resnet_shortcut(shortcut, channels * 4, stride)


def resnet_group(name: str, x, block_func: Callable, channels: int, count: int, stride: int):
    """``count`` blocks under scope ``name``; the first one strides. Each block is an LMS block
    (``'group0/block1'``...): under an active :class:`~kerastrainer.lms.LMS` it can be
    recomputed or offloaded; otherwise it is a plain call in its name scope."""
    with tf.name_scope(name):
        for i in range(count):
            x = lms_block(f"block{i}", block_func)(x, channels, stride if i == 0 else 1)
    return x


def preact_group(name: str, x, block_func: Callable, channels: int, count: int, stride: int):
    """Pre-activation blocks under scope ``name`` (LMS blocks, as in :func:`resnet_group`), then
    ``bnlast`` (BN-ReLU)."""
    with tf.name_scope(name):
        for i in range(count):
            x = lms_block(f"block{i}", block_func)(x, channels, stride if i == 0 else 1, i > 0)
        x = BNReLU("bnlast", x)
    return x


def resnet_stem(image):
    """The stem: 7x7/2 conv ``conv0`` with BN-ReLU, then the 3x3/2 max-pool ``pool0``."""
    x = Conv2D("conv0", image, 64, 7, strides=2, activation=BNReLU)
    return MaxPooling("pool0", x, 3, strides=2, padding="same")


def resnet_backbone(image, num_blocks: Sequence[int], group_func: Callable, block_func: Callable,
                    num_classes: int = 1000, stem_func: Callable = resnet_stem):
    """Stem (``stem_func``: 7x7/2 conv, 3x3/2 max-pool), four groups (64, 128, 256, 512
    channels), global average pooling and the ``linear`` classifier. Returns the logits.

    Example::

        logits = resnet_backbone(image, [3, 4, 6, 3], resnet_group, resnet_bottleneck)
    """
    if len(num_blocks) != 4:
        raise ValueError(f"resnet_backbone: num_blocks needs 4 entries (one per group), got {num_blocks!r}.")
    he_fan_out = keras.initializers.VarianceScaling(2.0, mode="fan_out", distribution="untruncated_normal")
    with argscope(Conv2D, use_bias=False, kernel_initializer=he_fan_out):
        # the stem holds a fifth of the activations at 224 px: an LMS block too, in no scope of
        # its own, so that its layers keep their names (conv0, pool0)
        x = lms_block("stem", stem_func, scope=False)(image)
        for i, (channels, stride) in enumerate(zip((64, 128, 256, 512), (1, 2, 2, 2))):
            x = group_func(f"group{i}", x, block_func, channels, num_blocks[i], stride)
        x = GlobalAvgPooling("gap", x)
        return FullyConnected("linear", x, num_classes,
                              kernel_initializer=keras.initializers.RandomNormal(stddev=0.01))


def resnet(image, depth: int = 50, num_classes: int = 1000, mode: str = "resnet",
           data_format: str = "channels_last"):
    """The logits of a ResNet of ``depth`` 18, 34, 50, 101 or 152 on ``image``.

    Args:
        image: (N, H, W, 3) float images (N, 3, H, W with ``data_format='channels_first'``).
        mode: ``'resnet'`` (v1.5) or ``'preact'`` (pre-activation, v2).

    Example::

        logits = resnet(image, 18, num_classes=10)
    """
    if depth not in RESNET_CONFIGS:
        raise ValueError(f"resnet: depth must be one of {sorted(RESNET_CONFIGS)}, got {depth!r}.")
    if mode not in ("resnet", "preact"):
        raise ValueError(f"resnet: mode must be 'resnet' or 'preact', got {mode!r}.")
    num_blocks, kind = RESNET_CONFIGS[depth]
    if mode == "resnet":
        group, block = resnet_group, (resnet_basicblock if kind == "basic" else resnet_bottleneck)
    else:
        group, block = preact_group, (preact_basicblock if kind == "basic" else preact_bottleneck)
    layers = [Conv2D, BatchNorm, MaxPooling, GlobalAvgPooling]
    with argscope(layers, data_format=data_format):
        return resnet_backbone(image, num_blocks, group, block, num_classes=num_classes)
