"""keras_experiments' multi-GPU optimizers (``RMSPropMGPU``...), as Keras 3 optimizers.

keras_experiments synchronised gradients inside these optimizers (``syncopt``). Under
kerastrainer every trainer averages the gradients over the replicas whatever the
optimizer, so each ``<Name>MGPU`` is the Keras optimizer ``<Name>``: ``gdev_list`` and
``usenccl`` are accepted and a warning names them. Keras 2's ``lr`` (the learning
rate) and ``decay`` (``lr / (1 + decay * iterations)``, as a
``keras.optimizers.schedules.InverseTimeDecay``) are translated.

Example::

    opt = RMSPropMGPU(lr=1e-4, decay=1e-6, gdev_list=get_available_gpus())
"""
from __future__ import annotations

import keras

from ..utils import logger

__all__ = ["OptimizerMultiGPUMixin", "AdagradMGPU", "AdadeltaMGPU", "AdamMGPU", "AdamaxMGPU", "NadamMGPU",
           "RMSPropMGPU", "SgdMGPU"]


class OptimizerMultiGPUMixin:
    """Mixed into a Keras optimizer: takes keras_experiments' and Keras 2's arguments (see the module doc)."""

    def __init__(self, *args, gdev_list=None, usenccl: bool = True, lr=None, decay=None, **kwargs):
        name = type(self).__name__
        if lr is not None:
            if "learning_rate" in kwargs or args:
                raise ValueError(f"{name}: give lr= or learning_rate=, not both.")
            kwargs["learning_rate"] = lr
        if decay:
            if args:  # the learning rate given by position
                base, args = args[0], args[1:]
            else:
                base = kwargs.get("learning_rate", self._keras2_default_lr)
            kwargs["learning_rate"] = keras.optimizers.schedules.InverseTimeDecay(
                float(base), decay_steps=1, decay_rate=float(decay))
            logger.info("%s(decay=%g): the learning rate is lr / (1 + decay * iterations) "
                        "(keras.optimizers.schedules.InverseTimeDecay), as in Keras 2.", name, decay)
        if gdev_list is not None or usenccl is not True:
            logger.warning("%s(gdev_list=..., usenccl=...) has no TF2 meaning and is ignored: kerastrainer's "
                           "trainers average the gradients over the replicas with any optimizer.", name)
        super().__init__(*args, **kwargs)
        self.gdev_list = gdev_list

    _keras2_default_lr = 0.001

    @property
    def ismgpu(self) -> bool:
        return True


class AdagradMGPU(OptimizerMultiGPUMixin, keras.optimizers.Adagrad):
    """keras_experiments' multi-GPU Adagrad: ``keras.optimizers.Adagrad``."""
    _keras2_default_lr = 0.01


class AdadeltaMGPU(OptimizerMultiGPUMixin, keras.optimizers.Adadelta):
    """keras_experiments' multi-GPU Adadelta: ``keras.optimizers.Adadelta``."""
    _keras2_default_lr = 1.0


class AdamMGPU(OptimizerMultiGPUMixin, keras.optimizers.Adam):
    """keras_experiments' multi-GPU Adam: ``keras.optimizers.Adam``."""


class AdamaxMGPU(OptimizerMultiGPUMixin, keras.optimizers.Adamax):
    """keras_experiments' multi-GPU Adamax: ``keras.optimizers.Adamax``."""
    _keras2_default_lr = 0.002


class NadamMGPU(OptimizerMultiGPUMixin, keras.optimizers.Nadam):
    """keras_experiments' multi-GPU Nadam: ``keras.optimizers.Nadam``."""
    _keras2_default_lr = 0.002


class RMSPropMGPU(OptimizerMultiGPUMixin, keras.optimizers.RMSprop):
    """keras_experiments' multi-GPU RMSprop: ``keras.optimizers.RMSprop``.

    Example::

        opt = RMSPropMGPU(lr=1e-4, decay=1e-6, gdev_list=gpus_list)
    """


class SgdMGPU(OptimizerMultiGPUMixin, keras.optimizers.SGD):
    """keras_experiments' multi-GPU SGD: ``keras.optimizers.SGD``."""
    _keras2_default_lr = 0.01
