"""Functional layers backed by Keras 3 layers, ``argscope``, regularization, model zoo.

``Conv2D('conv0', x, 32, 3)`` creates its Keras layer once, stores it in the tower's
layer store under the scoped name, and reuses it in every tower and every trace.
See ``docs/models.md``.

Example::

    from kerastrainer.models import *

    def build_graph(self, image, label):
        with argscope(Conv2D, activation=BNReLU, kernel_size=3):
            logits = (LinearWrap(image)
                      .Conv2D('conv0', 32)
                      .MaxPooling('pool0', 2)
                      .Conv2D('conv1', 64)
                      .GlobalAvgPooling('gap')
                      .FullyConnected('linear', 10)())
"""
# tfutils' __init__ first (it loads tfutils/argscope.py, which re-exports this package's argscope)
from ..tfutils import tower as _tower  # noqa: F401
from .arg_scope import argscope, enable_argscope_for_function, enable_argscope_for_module, get_arg_scope
from .registry import current_layer_store, disable_layer_logging, get_keras_layer, get_registered_layer, \
    keras_layer, layer_register, layer_scope, VariableHolder
from .conv2d import Conv2D, Conv2DTranspose, Deconv2D
from .fc import FullyConnected, batch_flatten
from .batch_norm import BatchNorm, BatchRenorm, BatchRenormalization, BNReLU, TowerBatchNormalization
from .pool import AvgPooling, FixedUnPooling, GlobalAvgPooling, MaxPooling
from .dropout import Dropout
from .layer_norm import ChannelAffineNormalization, InstanceNorm, LayerNorm
from .nonlin import Maxout, PReLU
from .shapes import ConcatWith
from .linearwrap import LinearWrap
from .regularize import l1_regularizer, l2_regularizer, regularize_cost, regularize_cost_from_collection
from .resnet import RESNET_CONFIGS, resnet, resnet_backbone
from .tflayer import rename_tflayer_get_variable

__all__ = [
    "argscope", "get_arg_scope", "enable_argscope_for_function", "enable_argscope_for_module",
    "layer_register", "layer_scope", "keras_layer", "get_keras_layer", "current_layer_store",
    "get_registered_layer", "disable_layer_logging", "VariableHolder",
    "Conv2D", "Conv2DTranspose", "Deconv2D", "FullyConnected", "batch_flatten",
    "BatchNorm", "BatchRenorm", "BatchRenormalization", "BNReLU", "TowerBatchNormalization", "MaxPooling", "AvgPooling", "GlobalAvgPooling", "FixedUnPooling",
    "Dropout", "LayerNorm", "InstanceNorm", "ChannelAffineNormalization", "PReLU", "Maxout", "ConcatWith",
    "LinearWrap", "regularize_cost", "regularize_cost_from_collection", "l2_regularizer",
    "l1_regularizer", "resnet", "resnet_backbone", "RESNET_CONFIGS", "rename_tflayer_get_variable",
]
