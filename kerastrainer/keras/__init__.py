"""Keras in kerastrainer: whole Keras models, Keras callbacks, and the Keras multi-GPU API.

- :class:`KerasModel`: ``compile`` / ``fit`` / ``evaluate`` / ``predict`` a ``keras.Model``
  on kerastrainer's trainers (the batch is global, split across replicas).
- :class:`KerasCallback`: run stock ``keras.callbacks`` in kerastrainer's loop.
- :func:`make_parallel`, :class:`ModelMGPU`, :func:`multi_gpu_model`: the seeds' data-parallel
  Keras API, on ``SyncMultiGPUTrainerReplicated``.
- Keras layers inside a ``ModelDesc`` tower: :func:`kerastrainer.models.keras_layer`.

See docs/keras.md. Inside this package ``import keras`` is the real Keras.
"""
from ..utils.devices import get_available_gpus, get_num_gpu
from .adapter import KerasModelDesc
from .callbacks import KerasCallback, wrap_keras_callbacks
from .data import KerasData, as_keras_data
from .model import KerasModel
from .parallel import ModelMGPU, make_parallel, multi_gpu_model
from .structure import KerasSignatureError

__all__ = ["KerasModel", "KerasModelDesc", "KerasCallback", "wrap_keras_callbacks", "KerasData",
           "as_keras_data", "KerasSignatureError", "make_parallel", "ModelMGPU", "multi_gpu_model",
           "get_available_gpus", "get_num_gpu"]
