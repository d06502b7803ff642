"""The layer cases of the differential suite, run by both sides from this one source.

Each case is a function ``build(M, tf, x)`` written against tensorpack's layer API: ``M`` is
``tensorpack.models`` (plus ``argscope``) in the oracle's process and ``kerastrainer.models`` in
the test's, ``tf`` is ``tensorflow`` on both. The input ``x`` has ``shape``; ``training`` is the
tower's ``is_training``. This module imports neither library, so the oracle (tensorpack 0.11,
tf-keras, graph mode) and the test (kerastrainer, Keras 3) load it as it is.

The argument combinations are those tensorpack programs use: tensorpack's own examples
(ResNet, ShuffleNet, FasterRCNN, GANs, the MNIST/CIFAR/SVHN convnets), its models_test.py.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Tuple

import numpy as np


class Case(NamedTuple):
    name: str
    shape: Tuple[int, ...]
    build: Callable
    training: bool = True


def _cases():
    C = []

    def case(name, shape, training=True):
        def deco(fn):
            C.append(Case(name, tuple(shape), fn, training))
            return fn
        return deco

    NHWC, NCHW = (2, 7, 7, 4), (2, 4, 7, 7)

    # ---------------------------------------------------------------- Conv2D
    @case("conv_nhwc", NHWC)
    def _(M, tf, x):
        return M.Conv2D("conv", x, 6, 3)

    @case("conv_nhwc_stride2_valid_relu_nobias", NHWC)
    def _(M, tf, x):
        return M.Conv2D("conv", x, 6, 3, strides=2, padding="valid", activation=tf.nn.relu, use_bias=False)

    @case("conv_nhwc_rect_kernel_legacy_names", NHWC)
    def _(M, tf, x):
        return M.Conv2D("conv", x, out_channel=5, kernel_shape=(3, 1), stride=(2, 1), padding="SAME")

    @case("conv_nchw", NCHW)
    def _(M, tf, x):
        return M.Conv2D("conv", x, 6, 3, data_format="channels_first")

    @case("conv_nchw_stride2_bias_relu", NCHW)
    def _(M, tf, x):
        return M.Conv2D("conv", x, 7, 3, strides=2, data_format="channels_first", activation=tf.nn.relu)

    @case("conv_nchw_width_eq_channels", (2, 4, 5, 6))     # bias along C even when W == C
    def _(M, tf, x):
        return M.Conv2D("conv", x, 6, 1, data_format="channels_first")

    @case("conv_split2_nhwc", NHWC)
    def _(M, tf, x):
        return M.Conv2D("conv", x, 8, 3, split=2)

    @case("conv_split4_nchw_1x1_nobias", (2, 8, 5, 5))   # ShuffleNet's group pointwise conv
    def _(M, tf, x):
        return M.Conv2D("conv", x, 12, 1, split=4, use_bias=False, data_format="channels_first")

    @case("conv_split2_nchw_3x3_stride2", (2, 8, 6, 6))
    def _(M, tf, x):
        return M.Conv2D("conv", x, 8, 3, strides=2, split=2, data_format="channels_first")

    @case("conv_dilation2_nhwc", NHWC)
    def _(M, tf, x):
        return M.Conv2D("conv", x, 5, 3, dilation_rate=2)

    @case("conv_dilation2_nchw", NCHW)
    def _(M, tf, x):
        return M.Conv2D("conv", x, 5, 3, dilation_rate=2, data_format="channels_first")

    @case("conv_bnrelu_activation", NHWC)                # conv0/bn/gamma ... as in ResNet
    def _(M, tf, x):
        return M.Conv2D("conv", x, 6, 3, activation=M.BNReLU, use_bias=False)

    @case("conv_bnrelu_activation_nchw", NCHW)
    def _(M, tf, x):
        with M.argscope([M.Conv2D, M.BatchNorm], data_format="channels_first"):
            return M.Conv2D("conv", x, 6, 3, activation=M.BNReLU, use_bias=False)

    # ---------------------------------------------------------------- Conv2DTranspose
    @case("deconv_nhwc_stride2", NHWC)
    def _(M, tf, x):
        return M.Conv2DTranspose("deconv", x, 5, 4, strides=2)

    @case("deconv_nhwc_valid_relu", NHWC)
    def _(M, tf, x):
        return M.Conv2DTranspose("deconv", x, 3, 3, strides=2, padding="valid", activation=tf.nn.relu)

    @case("deconv_nchw_stride2", NCHW)
    def _(M, tf, x):
        return M.Conv2DTranspose("deconv", x, 5, 4, strides=2, data_format="channels_first")

    @case("deconv_nchw_nobias", NCHW)
    def _(M, tf, x):
        return M.Conv2DTranspose("deconv", x, 3, 3, strides=1, use_bias=False, data_format="channels_first")

    # ---------------------------------------------------------------- FullyConnected
    @case("fc_4d_input", NHWC)
    def _(M, tf, x):
        return M.FullyConnected("fc", x, 10)

    @case("fc_2d_relu_legacy", (3, 12))
    def _(M, tf, x):
        return M.FullyConnected("fc", x, out_dim=7, nl=tf.nn.relu)

    @case("fc_nobias", (3, 12))
    def _(M, tf, x):
        return M.FullyConnected("fc", x, 5, use_bias=False)

    # ---------------------------------------------------------------- BatchNorm
    @case("bn_train_nhwc", NHWC)
    def _(M, tf, x):
        return M.BatchNorm("bn", x)

    @case("bn_train_nchw", NCHW)
    def _(M, tf, x):
        return M.BatchNorm("bn", x, data_format="channels_first")

    @case("bn_train_2d", (6, 5))
    def _(M, tf, x):
        return M.BatchNorm("bn", x)

    @case("bn_infer_nhwc", NHWC, training=False)
    def _(M, tf, x):
        return M.BatchNorm("bn", x)

    @case("bn_infer_nchw", NCHW, training=False)
    def _(M, tf, x):
        return M.BatchNorm("bn", x, data_format="channels_first")

    @case("bn_train_momentum_eps_noscale", NHWC)
    def _(M, tf, x):
        return M.BatchNorm("bn", x, momentum=0.99, epsilon=1e-3, scale=False)

    @case("bn_train_legacy_decay_nocenter", NHWC)
    def _(M, tf, x):
        return M.BatchNorm("bn", x, decay=0.8, use_bias=False)

    @case("bn_train_gamma_zeros", NHWC)              # ResNet's zero-init of the last BN
    def _(M, tf, x):
        return M.BatchNorm("bn", x, gamma_initializer=tf.zeros_initializer())

    @case("bn_train_ema_internal", NHWC)
    def _(M, tf, x):
        return M.BatchNorm("bn", x, ema_update="internal")

    @case("bn_train_ema_collection", NCHW)
    def _(M, tf, x):
        return M.BatchNorm("bn", x, ema_update="collection", data_format="channels_first")

    @case("bn_frozen_in_training_tower", NHWC)        # training=False in a training tower
    def _(M, tf, x):
        return M.BatchNorm("bn", x, training=False)

    @case("bn_batch_stats_in_inference", NHWC, training=False)
    def _(M, tf, x):
        return M.BatchNorm("bn", x, training=True)

    @case("bn_batch_stats_in_inference_internal", NHWC, training=False)
    def _(M, tf, x):
        return M.BatchNorm("bn", x, training=True, ema_update="internal")

    @case("bn_train_ema_skip", NHWC)
    def _(M, tf, x):
        return M.BatchNorm("bn", x, ema_update="skip")

    @case("bn_train_axis1_2d", (6, 5))
    def _(M, tf, x):
        return M.BatchNorm("bn", x, axis=1)

    @case("bnrelu", NHWC)
    def _(M, tf, x):
        return M.BNReLU("bnrelu", x)

    # ---------------------------------------------------------------- BatchRenorm
    @case("brenorm_train_nhwc", NHWC)
    def _(M, tf, x):
        return M.BatchRenorm("brn", x, rmax=3.0, dmax=5.0)

    @case("brenorm_infer_nhwc", NHWC, training=False)
    def _(M, tf, x):
        return M.BatchRenorm("brn", x, rmax=3.0, dmax=5.0)

    @case("brenorm_train_nhwc_tight", NHWC)
    def _(M, tf, x):
        return M.BatchRenorm("brn", x, rmax=1.5, dmax=0.1, momentum=0.8)

    # ---------------------------------------------------------------- LayerNorm, InstanceNorm
    @case("ln_nhwc", NHWC)
    def _(M, tf, x):
        return M.LayerNorm("ln", x)

    @case("ln_nchw_noscale", NCHW)
    def _(M, tf, x):
        return M.LayerNorm("ln", x, scale=False, data_format="channels_first")

    @case("ln_2d_nocenter", (3, 6))
    def _(M, tf, x):
        return M.LayerNorm("ln", x, center=False, epsilon=1e-3)

    @case("in_nhwc", NHWC)
    def _(M, tf, x):
        return M.InstanceNorm("in", x)

    @case("in_nchw", NCHW)
    def _(M, tf, x):
        return M.InstanceNorm("in", x, data_format="channels_first")

    @case("in_nchw_center_only", NCHW)       # tensorpack 0.11's center=/scale= (use_affine is deprecated)
    def _(M, tf, x):
        return M.InstanceNorm("in", x, scale=False, data_format="channels_first")

    @case("in_no_affine", NHWC)
    def _(M, tf, x):
        return M.InstanceNorm("in", x, use_affine=False)

    # ---------------------------------------------------------------- pooling
    @case("maxpool_nhwc", NHWC)
    def _(M, tf, x):
        return M.MaxPooling("pool", x, 2)

    @case("maxpool_3_2_same_nchw", NCHW)       # ShuffleNet's pool1
    def _(M, tf, x):
        return M.MaxPooling("pool", x, 3, 2, padding="SAME", data_format="channels_first")

    @case("avgpool_3_2_same_nchw", NCHW)       # ShuffleNet's shortcut
    def _(M, tf, x):
        return M.AvgPooling("pool", x, 3, 2, padding="SAME", data_format="channels_first")

    @case("avgpool_legacy_names_nhwc", NHWC)
    def _(M, tf, x):
        return M.AvgPooling("pool", x, shape=3, stride=2)

    @case("gap_nhwc", NHWC)
    def _(M, tf, x):
        return M.GlobalAvgPooling("gap", x)

    @case("gap_nchw", NCHW)
    def _(M, tf, x):
        return M.GlobalAvgPooling("gap", x, data_format="channels_first")

    @case("unpool2_nhwc", NHWC)
    def _(M, tf, x):
        return M.FixedUnPooling("unpool", x, 2)

    @case("unpool_mat_nchw", NCHW)
    def _(M, tf, x):
        mat = np.array([[1.0, 0.5, 0.0], [0.25, 2.0, -1.0]], dtype="float32")
        return M.FixedUnPooling("unpool", x, (2, 3), unpool_mat=mat, data_format="channels_first")

    @case("unpool_ones_nhwc", NHWC)             # BEGAN/ the SRGAN examples' nearest-neighbour upsampling
    def _(M, tf, x):
        return M.FixedUnPooling("unpool", x, 2, unpool_mat=np.ones((2, 2), dtype="float32"))

    # ---------------------------------------------------------------- the rest
    @case("dropout_inference", NHWC, training=False)
    def _(M, tf, x):
        return M.Dropout("drop", x, rate=0.5)

    @case("dropout_keep_prob_inference", NHWC, training=False)
    def _(M, tf, x):
        return M.Dropout(x, keep_prob=0.3)

    @case("prelu", NHWC)
    def _(M, tf, x):
        return M.PReLU("prelu", x)

    @case("prelu_init", (3, 6))
    def _(M, tf, x):
        return M.PReLU("prelu", x, init=0.25)

    @case("concatwith", NHWC)
    def _(M, tf, x):
        return M.ConcatWith(x, [x * 2.0, tf.nn.relu(x)], 3)

    @case("leaky_relu_after_conv", NHWC)       # the GAN examples' LeakyReLU is tf.nn.leaky_relu
    def _(M, tf, x):
        return M.Conv2D("conv", x, 4, 3, activation=lambda t: tf.nn.leaky_relu(t, 0.2))

    @case("linearwrap_chain", NHWC)
    def _(M, tf, x):
        return (M.LinearWrap(x)
                .Conv2D("conv0", 6, 3, activation=tf.nn.relu)
                .MaxPooling("pool0", 2)
                .BatchNorm("bn")
                .tf.nn.relu()
                .Conv2D("conv1", 8, 1, use_bias=False)
                .GlobalAvgPooling("gap")
                .FullyConnected("fc", 3)())

    @case("argscope_defaults_nchw", NCHW)        # ResNet / ShuffleNet style defaults
    def _(M, tf, x):
        with M.argscope([M.Conv2D, M.MaxPooling, M.AvgPooling, M.GlobalAvgPooling, M.BatchNorm],
                        data_format="channels_first"), \
                M.argscope(M.Conv2D, use_bias=False, kernel_size=3):
            x = M.Conv2D("conv0", x, 8, strides=2, activation=M.BNReLU)
            x = M.AvgPooling("pool", x, 2)
            x = M.Conv2D("conv1", x, 8, split=2)
            x = M.BatchNorm("bn", x)
            return M.GlobalAvgPooling("gap", x)

    @case("argscope_override", NHWC)
    def _(M, tf, x):
        with M.argscope(M.Conv2D, filters=5, kernel_size=3, activation=tf.nn.relu):
            a = M.Conv2D("c0", x)
            return M.Conv2D("c1", a, kernel_size=1, activation=None)

    return C


CASES = _cases()
CASES_BY_NAME = {c.name: c for c in CASES}


def case_input(case: Case, seed: int = 0) -> np.ndarray:
    """The input of a case; the loss whose gradients are compared is ``sum(y * upstream(y))``."""
    return np.random.RandomState(seed).randn(*case.shape).astype("float32")


def upstream(tf, y):
    """A fixed, non-constant upstream gradient of ``y``'s shape, built the same way on both sides."""
    n = tf.size(y)
    return tf.reshape(tf.sin(tf.cast(tf.range(n), tf.float32) * 0.37 + 0.1), tf.shape(y))
