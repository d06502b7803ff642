"""Keras in kerastrainer: whole Keras models, Keras callbacks, and the Keras multi-GPU API.

- :class:`KerasModel`: ``compile`` / ``fit`` / ``evaluate`` / ``predict`` a ``keras.Model``
  on kerastrainer's trainers (the batch is global, split across replicas).
- :class:`KerasCallback`: run stock ``keras.callbacks`` in kerastrainer's loop.
- :func:`make_parallel`, :class:`ModelMGPU`, :func:`multi_gpu_model`, :class:`ModelKerasMGPU`,
  :func:`get_available_gpus`, :func:`print_mgpu_modelsummary`: keras_experiments' and Keras 2's
  data-parallel API (also at keras_experiments' paths: ``kerastrainer.keras.multigpu``,
  ``kerastrainer.keras.multigpu.optimizers``, ``kerastrainer.keras.callbacks.timing``).
- Keras layers inside a ``ModelDesc`` tower: :func:`kerastrainer.models.keras_layer`.

See docs/keras.md and docs/migration-keras2-tflms.md. Inside this package ``import keras`` is the real Keras.
"""
from ..utils.devices import get_num_gpu
from .model_desc import KerasModelDesc
from .callbacks import KerasCallback, wrap_keras_callbacks
from .data import KerasData, as_keras_data
from .model import KerasModel
from .callbacks.timing import BatchTiming, SamplesPerSec
from .parallel import (GPUListType, ModelKerasMGPU, ModelMGPU, get_available_gpus, make_parallel, multi_gpu_model,
                       print_mgpu_modelsummary)
from .structure import KerasSignatureError

__all__ = ["KerasModel", "KerasModelDesc", "KerasCallback", "wrap_keras_callbacks", "KerasData",
           "as_keras_data", "KerasSignatureError", "make_parallel", "ModelMGPU", "multi_gpu_model",
           "get_available_gpus", "get_num_gpu", "ModelKerasMGPU", "GPUListType", "print_mgpu_modelsummary",
           "BatchTiming", "SamplesPerSec"]
