"""The seeds' Keras multi-GPU API, in Keras 3 form, on kerastrainer's own loop.

``make_parallel(serial_model, gdev_list)`` (and ``multi_gpu_model(model, gpus)``)
return a :class:`ModelMGPU`: a ``keras.Model`` that compiles and fits like the
original, splits each **global** batch across the devices, and *shares its
weights* with the serial model (they are the same variables: saving the serial
model after ``fit`` saves the trained weights; ``ModelMGPU.save`` saves the serial
model, as in the seeds). Training runs on :class:`~kerastrainer.keras.KerasModel`
with ``SyncMultiGPUTrainerReplicated`` (or the parameter-server trainer when
``usenccl=False``): several steps per ``tf.function`` call on several replicas,
which ``keras.Model.fit(steps_per_execution>1)`` cannot do under ``MirroredStrategy``.

On a machine without GPUs the devices are logical CPU devices (``'/cpu:0'``...).

Example::

    model = make_parallel(serial_model, get_available_gpus())   # or ['/cpu:0', '/cpu:1']
    model.compile(keras.optimizers.SGD(0.1), 'sparse_categorical_crossentropy', metrics=['accuracy'])
    model.fit(x, y, batch_size=128, epochs=5, validation_data=(xv, yv))
    serial_model.save('trained.keras')
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Union

import keras
import tensorflow as tf

from ..train.trainers import SyncMultiGPUTrainerParameterServer, SyncMultiGPUTrainerReplicated
from ..utils import logger
from ..utils.devices import get_available_gpus, get_logical_cpus, training_devices
from .model import KerasModel

__all__ = ["ModelMGPU", "make_parallel", "multi_gpu_model"]


def _available_devices() -> List[str]:
    return get_available_gpus() + get_logical_cpus()


def normalize_devices(devices: Sequence[Union[str, int]]) -> List[str]:
    """Device names as ``'/gpu:i'`` / ``'/cpu:i'``; ints are tower ids (GPUs, else logical CPUs).

    Raises ValueError listing the available devices when one does not exist.
    """
    out = []
    available = _available_devices()
    ids = [d for d in devices if isinstance(d, int)]
    if ids:
        out_ids = training_devices(ids)
    for d in devices:
        if isinstance(d, int):
            out.append(out_ids[ids.index(d)])
            continue
        if not isinstance(d, str):
            raise TypeError(f"A device must be a name like '/gpu:0' or an int id; got {d!r}.")
        try:
            spec = tf.DeviceSpec.from_string(d if d.startswith("/") else "/" + d)
        except ValueError as e:
            raise ValueError(f"'{d}' is not a device name ({e}); available: {available}.") from None
        kind = (spec.device_type or "").lower()
        name = f"/{kind}:{spec.device_index if spec.device_index is not None else 0}"
        if kind not in ("gpu", "cpu") or name not in available:
            raise ValueError(f"Device '{d}' does not exist on this machine. Available devices: {available}. "
                             "(Logical CPU devices are made with tf.config.set_logical_device_configuration "
                             "before TensorFlow starts.)")
        out.append(name)
    dup = sorted({d for d in out if out.count(d) > 1})
    if dup:
        raise ValueError(f"The device list names {dup} more than once: {list(devices)}.")
    return out


class ModelMGPU(keras.Model):
    """A data-parallel view of ``serial_model`` on the devices ``gdev_list`` (see the module doc).

    ``compile``, ``fit``, ``evaluate`` and ``predict`` take Keras' arguments; ``save``,
    ``save_weights``, ``load_weights``, ``get_weights``, ``set_weights`` and ``summary``
    act on the serial model. Calling it (``model(x)``) calls the serial model.

    Args:
        serial_model: the ``keras.Model`` to train.
        gdev_list: device names (``'/gpu:0'``, ``'/cpu:1'``) or tower ids, at least 2.
        ps_device, usenccl, initsync, syncopt, enqueue: the seeds' options, see
            :func:`make_parallel`.

    Example::

        pmodel = ModelMGPU(serial_model=model, gdev_list=['/gpu:0', '/gpu:1'])
    """

    def __init__(self, serial_model: keras.Model = None, gdev_list: Sequence = (), ps_device: str = "/cpu:0",
                 usenccl: bool = False, initsync: bool = True, syncopt: bool = False, enqueue: bool = False,
                 **kwargs):
        if not isinstance(serial_model, keras.Model):
            raise TypeError(f"ModelMGPU needs serial_model=<a keras.Model>; got {type(serial_model).__name__}.")
        devices = normalize_devices(list(gdev_list))
        if len(devices) < 2:
            raise ValueError(f"ModelMGPU needs at least 2 devices to split batches over; got {devices}. "
                             "Use the serial model itself on one device.")
        super().__init__(name=kwargs.pop("name", f"{serial_model.name}_mgpu"), **kwargs)
        self._smodel = serial_model
        self._gdev_list = devices
        self._ps_device = ps_device
        self._usenccl = bool(usenccl)
        del initsync, syncopt, enqueue  # MirroredStrategy always syncs; the input is always queued
        self._km: Optional[KerasModel] = None
        self.built = True

    @property
    def serial_model(self) -> keras.Model:
        return self._smodel

    @property
    def gdev_list(self) -> List[str]:
        return list(self._gdev_list)

    def _make_trainer(self):
        n = len(self._gdev_list)
        if self._usenccl:
            trainer = SyncMultiGPUTrainerReplicated(n, mode="nccl")
        else:
            on_cpu = "cpu" in str(self._ps_device).lower()
            trainer = SyncMultiGPUTrainerParameterServer(n, ps_device="cpu" if on_cpu else "gpu")
        trainer.devices = list(self._gdev_list)  # exactly the devices asked for
        return trainer

    def call(self, inputs, training=None):
        return self._smodel(inputs, training=training)

    def compile(self, optimizer="rmsprop", loss=None, metrics=None, loss_weights=None, **kwargs):
        """Keras' ``compile``; other Keras arguments (``steps_per_execution``, ``jit_compile``...)
        are accepted and ignored: kerastrainer picks the steps per call itself."""
        if kwargs:
            logger.info("ModelMGPU.compile ignores %s.", sorted(kwargs))
        self._km = KerasModel(self._smodel, trainer=self._make_trainer())
        self._km.compile(optimizer, loss, metrics=metrics, loss_weights=loss_weights)

    def _compiled(self) -> KerasModel:
        if self._km is None:
            raise RuntimeError("Call compile(optimizer, loss, ...) on the parallel model before fit/evaluate.")
        return self._km

    @property
    def optimizer(self):
        return self._km._optimizer if self._km is not None else None

    @optimizer.setter
    def optimizer(self, value):  # keras.Model.__init__ sets it to None
        if value is not None:
            raise AttributeError("Set the optimizer with compile().")

    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None,
            validation_split=0.0, validation_data=None, shuffle=True, initial_epoch=0,
            steps_per_epoch=None, validation_batch_size=None, **kwargs):
        """Keras' ``fit``: ``batch_size`` is the global batch, split across the devices."""
        if validation_split:
            raise ValueError("validation_split is not supported; give validation_data.")
        if kwargs:
            logger.info("ModelMGPU.fit ignores %s.", sorted(kwargs))
        del verbose
        data = (x, y) if y is not None else x
        return self._compiled().fit(input=data, validation_data=validation_data, batch_size=batch_size,
                                    max_epoch=epochs, starting_epoch=initial_epoch + 1, shuffle=shuffle,
                                    steps_per_epoch=steps_per_epoch, callbacks=callbacks,
                                    validation_batch_size=validation_batch_size)

    def evaluate(self, x=None, y=None, batch_size=None, steps=None, return_dict=False, **kwargs):
        """Keras' ``evaluate``: the loss, then the metrics (a dict with ``return_dict=True``)."""
        stats = self._compiled().evaluate((x, y) if y is not None else x, batch_size=batch_size, steps=steps)
        if return_dict:
            return stats
        values = list(stats.values())
        return values[0] if len(values) == 1 else values

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        return self._smodel.predict(x, batch_size=batch_size, verbose=0, steps=steps)

    # --- weights live in the serial model -----------------------------------------------------
    def save(self, filepath, *args, **kwargs):
        return self._smodel.save(filepath, *args, **kwargs)

    def save_weights(self, filepath, *args, **kwargs):
        return self._smodel.save_weights(filepath, *args, **kwargs)

    def load_weights(self, filepath, *args, **kwargs):
        return self._smodel.load_weights(filepath, *args, **kwargs)

    def get_weights(self):
        return self._smodel.get_weights()

    def set_weights(self, weights):
        return self._smodel.set_weights(weights)

    def summary(self, *args, **kwargs):
        return self._smodel.summary(*args, **kwargs)

    def get_config(self):
        raise NotImplementedError("ModelMGPU is not serializable; save or serialize the serial model.")


def make_parallel(serial_model: keras.Model, gdev_list: Sequence, ps_device: str = "/cpu:0",
                  usenccl: bool = False, initsync: bool = True, syncopt: bool = False, enqueue: bool = False,
                  model_class=ModelMGPU) -> keras.Model:
    """Data-parallel ``serial_model`` on the devices ``gdev_list`` (the seeds' API).

    Args:
        serial_model: the ``keras.Model``.
        gdev_list: device names (``get_available_gpus()``, or ``['/cpu:0', '/cpu:1']``)
            or tower ids. With fewer than 2 devices the serial model is returned unchanged.
        ps_device: where gradients are reduced when ``usenccl`` is False.
        usenccl: all-reduce with NCCL (``SyncMultiGPUTrainerReplicated(mode='nccl')``;
            falls back to a host reduction without GPUs).
        initsync, syncopt, enqueue: accepted for compatibility; replicas always start
            from the same weights and share one optimizer state, and the input is
            always an in-graph queue.
        model_class: the class to build (a :class:`ModelMGPU` subclass).

    Example::

        pmodel = make_parallel(model, ['/gpu:0', '/gpu:1'])
    """
    gdev_list = list(gdev_list)
    if len(gdev_list) < 2:
        logger.info("make_parallel: %d device(s); the serial model is used unchanged.", len(gdev_list))
        return serial_model
    return model_class(serial_model=serial_model, gdev_list=gdev_list, ps_device=ps_device, usenccl=usenccl,
                       initsync=initsync, syncopt=syncopt, enqueue=enqueue)


def multi_gpu_model(model: keras.Model, gpus: Union[int, Sequence[int]]) -> keras.Model:
    """``model`` replicated on ``gpus`` devices (an int >= 2, or a list of >= 2 device ids).

    The batch given to ``fit`` is global and split across the devices, as in
    ``keras.utils.multi_gpu_model`` of Keras 2.

    Example::

        pmodel = multi_gpu_model(model, gpus=2)
    """
    if isinstance(gpus, bool) or not isinstance(gpus, (int, list, tuple)):
        raise TypeError(f"gpus must be an int or a list of device ids; got {gpus!r}.")
    if isinstance(gpus, int):
        if gpus <= 1:
            raise ValueError(f"multi_gpu_model needs gpus >= 2 to split batches over devices; got gpus={gpus}. "
                             "On one device use the model itself.")
        ids = list(range(gpus))
    else:
        ids = list(gpus)
        if len(ids) <= 1:
            raise ValueError(f"multi_gpu_model needs a list of at least 2 device ids; got {ids}. "
                             "On one device use the model itself.")
    return ModelMGPU(serial_model=model, gdev_list=normalize_devices(ids))
