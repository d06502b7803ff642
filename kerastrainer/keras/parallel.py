"""The Keras multi-GPU API of keras_experiments and Keras 2, in Keras 3 form, on kerastrainer's loop.

``make_parallel(serial_model, gdev_list)`` / ``ModelMGPU`` (keras_experiments) and
``multi_gpu_model(model, gpus)`` (Keras 2) return a :class:`ModelMGPU`: a Keras
functional model laid out as Keras 2's (``layers``: the inputs, one slicing
``Lambda`` per input and device, the *template* (serial) model, one ``Concatenate``
per output named after it; ``parallel_model.layers[-2]`` is the template of a
one-output model). Calling it runs that graph; ``compile``, ``fit`` (and Keras 2's
``fit_generator``), ``evaluate`` and ``predict`` train the template on
:class:`~kerastrainer.keras.KerasModel` with ``SyncMultiGPUTrainerParameterServer``
(or ``SyncMultiGPUTrainerReplicated`` with ``usenccl=True`` / ``cpu_merge=False``):
several steps per ``tf.function`` call on several replicas, each **global** batch
split across the devices and each replica's loss weighted by its share of it, so any
batch size gives the serial model's numbers.

The weights are the template's (the same variables): saving the template after
``fit`` saves the trained weights, and ``save``/``load_weights``... of the parallel
model act on the template, as in keras_experiments. The methods are also instance
attributes, so the keras#2436 wrapper (a ``keras.Model`` subclass that copies
``multi_gpu_model(...).__dict__`` and routes ``load``/``save`` to the template)
trains and saves too.

Devices: ``get_available_gpus()`` lists the GPUs; on a machine without GPUs it lists
the logical CPU devices when several were made (``ensure_tower_devices(n)``, or the
test suite's), so the same program runs in CI.

Several workers (keras_experiments' SLURM example): a list naming the devices of
every worker (``'/job:worker/task:1/device:GPU:0'``..., :func:`get_allworkers_devlist`)
trains with multi-worker data parallelism, on the ``MultiWorkerTrainer`` the process
created first thing (under ``srun`` or ``kerastrainer-run``): each worker's replicas
are its own devices in the list, the gradients are all-reduced across the workers,
``batch_size`` is the global batch of all the workers' devices, and each worker reads
its shard of the data. :func:`split_worker_devices` checks the list against the cluster.

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

from .._internals import functional_input_structure, keras_tensor_producer
from ..train.trainers import SyncMultiGPUTrainerParameterServer, SyncMultiGPUTrainerReplicated
from ..utils import logger
from .model import KerasModel
from .parallel_devices import (GPUListType, ModelMGPUError, _available_devices, _device_pool, _names_several_workers,
                               _physical_gpus, _warn_cluster_knobs, get_allworkers_devlist, get_available_gpus,
                               normalize_devices, split_worker_devices)

__all__ = ["ModelMGPU", "make_parallel", "multi_gpu_model", "ModelKerasMGPU", "GPUListType",
           "get_available_gpus", "print_mgpu_modelsummary", "get_allworkers_devlist", "split_worker_devices"]

def _warn_knobs(who: str, **knobs) -> None:
    """Warn about each old knob set to a value that has no TF2 meaning."""
    meaning = {
        "initsync": (True, "replicas always start from the same weights (MirroredStrategy mirrors every variable)"),
        "syncopt": (False, "the gradients are always averaged over the replicas, with any optimizer"),
        "enqueue": (False, "the input is always an in-graph queue (QueueInput) feeding the devices"),
        "cpu_relocation": (False, "the weights are mirrored on every replica's device, wherever the template "
                                  "was built"),
    }
    for name, value in knobs.items():
        default, why = meaning[name]
        if value != default:
            logger.warning("%s(%s=%r) has no TF2 meaning and is ignored: %s.", who, name, value, why)


# Keras 2's queue and worker knobs, with their defaults (which change nothing here)
_QUEUE_KNOBS = {"max_queue_size": 10, "workers": 1, "use_multiprocessing": False}


def _warn_dropped(who: str, honoured: Optional[dict] = None, **given) -> None:
    """Warn naming each argument given a value this method cannot honour; None, an empty list,
    the queue knobs' defaults and the values in ``honoured`` (name -> values) change nothing."""
    honoured = {**{k: (v,) for k, v in _QUEUE_KNOBS.items()}, **(honoured or {})}
    dropped = sorted(k for k, v in given.items() if v is not None and not (isinstance(v, (list, tuple)) and not v)
                     and not any(type(v) is type(h) and v == h for h in honoured.get(k, ())))
    queue = [k for k in dropped if k in _QUEUE_KNOBS]
    other = [k for k in dropped if k not in _QUEUE_KNOBS]
    if queue:
        logger.warning("%s ignores %s: Keras 2's queue and worker knobs have no meaning here; kerastrainer's "
                       "input pipeline replaces them (an in-graph queue fed by the DataFlow; load in parallel "
                       "with MultiProcessRunner or MultiProcessMapData).", who, queue)
    if other:
        logger.warning("%s ignores %s.", who, other)


def _ps_name(ps_device) -> str:
    """``ps_device`` as ``'/cpu:i'`` / ``'/gpu:i'`` (the form the devices have); ``'/gpu'`` when it
    names no index (any GPU)."""
    try:
        spec = ps_device if isinstance(ps_device, tf.DeviceSpec) else \
            tf.DeviceSpec.from_string(ps_device if ps_device.startswith("/") else "/" + ps_device)
    except (ValueError, AttributeError):
        return str(ps_device)
    kind = f"/{(spec.device_type or 'CPU').lower()}"
    return kind if spec.device_index is None else f"{kind}:{spec.device_index}"


def get_slice(data, i: int, parts: int):
    """Slice ``i`` of ``parts`` of the batch axis (sizes differ by at most one, as SplitBatches)."""
    size = tf.shape(data)[0]
    return data[(i * size) // parts:((i + 1) * size) // parts]


def _parallel_graph(template: keras.Model, devices: List[str], merge_device: str):
    """Keras 2's layout: inputs -> a slicing Lambda per input and device -> template -> Concatenate per output."""
    try:
        flat = list(template.inputs) if template.built and template.inputs else None
    except (AttributeError, ValueError):
        flat = None
    struct = functional_input_structure(template) if flat else None
    if flat and struct is None:  # a Sequential: one input tensor
        struct = flat[0] if len(flat) == 1 else flat
    if struct is None:
        raise ValueError(f"The model '{template.name}' has no known inputs: build it with keras.Input (or call "
                         "model.build(input_shape) on a Sequential) before making it parallel.")
    flat_in = keras.tree.flatten(struct)
    names = set()
    towers = None
    out_struct = None
    for i, dev in enumerate(devices):
        with tf.device(dev):
            slices = []
            for k, x in enumerate(flat_in):
                name = f"slice_in{k}_dev{i}"
                names.add(name)
                slices.append(keras.layers.Lambda(get_slice, output_shape=tuple(x.shape[1:]), name=name,
                                                  arguments={"i": i, "parts": len(devices)})(x))
            out = template(keras.tree.pack_sequence_as(struct, slices))
        out_struct = out
        flat_out = keras.tree.flatten(out)
        towers = [[] for _ in flat_out] if towers is None else towers
        for t, o in zip(towers, flat_out):
            t.append(o)
    out_names = list(getattr(template, "output_names", None) or [])
    if not out_names:  # a Sequential: the layers that make the outputs
        out_names = [keras_tensor_producer(t) for t in template.outputs]
        out_names = [getattr(op, "name", "") for op in out_names]
    if len(out_names) != len(towers):
        out_names = [f"output_{k}" for k in range(len(towers))]
    taken = names | {template.name} | {getattr(x, "name", "") for x in flat_in}
    merged = []
    with tf.device(merge_device):
        for name, outs in zip(out_names, towers):
            while name in taken:
                name += "_merge"
            taken.add(name)
            merged.append(keras.layers.Concatenate(axis=0, name=name)(outs))
    return struct, keras.tree.pack_sequence_as(out_struct, merged)


# methods kept in the instance __dict__ too, so a wrapper copying __dict__ (keras#2436) keeps them
_ROUTED = ("compile", "fit", "fit_generator", "evaluate", "evaluate_generator", "predict", "predict_generator",
           "predict_on_batch", "get_weights", "set_weights", "save", "save_weights", "load_weights", "call")


class ModelMGPU(keras.Model):
    """A data-parallel view of ``serial_model`` on the devices ``gdev_list`` (see the module doc).

    ``compile``, ``fit`` (``fit_generator``), ``evaluate`` and ``predict`` take Keras'
    arguments; ``save``, ``save_weights``, ``load_weights``, ``get_weights`` and
    ``set_weights`` act on the serial model; ``summary`` and ``layers`` show the
    parallel graph (:func:`print_mgpu_modelsummary` adds the serial model's summary).
    With the devices of several workers, the graph splits over this worker's own
    devices (``local_devices``) and ``fit`` trains on the process's ``MultiWorkerTrainer``.

    Args:
        serial_model: the ``keras.Model`` to train (the template), with known inputs.
        gdev_list: at least 2 devices: names (``'/gpu:0'``, ``'/cpu:1'``), ``tf.DeviceSpec``
            objects, or ids in :func:`get_available_gpus`' list. Or the devices of every
            worker of a multi-worker job (``'/job:worker/task:i/device:GPU:0'``, see
            :func:`make_parallel`): this process's ``MultiWorkerTrainer`` trains on them.
        ps_device: where the gradients are reduced (and the outputs merged): a CPU means
            ``'/cpu:0'``, a GPU the first device of ``gdev_list`` (a warning names any other).
            Several workers: no parameter server (a warning names one given).
        usenccl: all-reduce the gradients (``SyncMultiGPUTrainerReplicated``, NCCL on GPUs)
            instead of reducing them on ``ps_device``. Several workers: the trainer's
            communication decides (a warning says so).
        initsync, syncopt, enqueue: keras_experiments' knobs without a TF2 meaning:
            accepted, and a warning names each one set away from its default.

    Example::

        pmodel = ModelMGPU(serial_model=model, gdev_list=['/gpu:0', '/gpu:1'])
    """

    def __init__(self, serial_model: keras.Model = None, gdev_list: Sequence = None, ps_device: str = "/cpu:0",
                 usenccl: bool = False, initsync: bool = True, syncopt: bool = False, enqueue: bool = False,
                 **kwargs):
        if serial_model is None:
            raise ModelMGPUError('Keyword argument "serial_model" required for ModelMGPU.')
        if gdev_list is None:
            raise ModelMGPUError('Keyword argument "gdev_list" required for ModelMGPU.')
        if not isinstance(serial_model, keras.Model):
            raise TypeError(f"ModelMGPU needs serial_model=<a keras.Model>; got {type(serial_model).__name__}.")
        cluster_trainer = None
        if _names_several_workers(list(gdev_list)):  # every worker's devices: multi-worker data parallelism
            cluster_trainer, all_devices, devices = split_worker_devices(list(gdev_list))
            _warn_cluster_knobs(type(self).__name__, ps_device=ps_device, usenccl=usenccl)
        else:
            devices = all_devices = normalize_devices(list(gdev_list))
        if len(all_devices) < 2:
            raise ModelMGPUError(f"ModelMGPU needs at least 2 devices to split batches over; got {all_devices}. "
                                 "Use the serial model itself on one device.")
        _warn_knobs(type(self).__name__, initsync=initsync, syncopt=syncopt, enqueue=enqueue)
        ps = tf.DeviceSpec.from_string(ps_device) if isinstance(ps_device, str) else ps_device
        on_cpu = (getattr(ps, "device_type", None) or "CPU").upper() == "CPU"
        merge = "/cpu:0" if on_cpu else devices[0]   # the trainer reduces on the CPU or the first device
        if cluster_trainer is None and _ps_name(ps_device) not in (merge, merge.split(":")[0]):
            logger.warning("%s(ps_device=%r): the outputs are merged (and, without usenccl, the gradients "
                           "reduced) on %r, not on %r: SyncMultiGPUTrainerParameterServer reduces on '/cpu:0' "
                           "or on the first device of gdev_list.", type(self).__name__, ps_device, merge,
                           _ps_name(ps_device))
        inputs, outputs = _parallel_graph(serial_model, devices, merge)
        super().__init__(inputs=inputs, outputs=outputs, name=kwargs.pop("name", f"{serial_model.name}_mgpu"),
                         **kwargs)
        state = dict(_smodel=serial_model, _gdev_list=all_devices, _local_devices=devices, _ps_on_cpu=on_cpu,
                     _usenccl=bool(usenccl), _cluster_trainer=cluster_trainer, _km=None)
        for name in _ROUTED:
            state[name] = getattr(self, name)
        self.__dict__.update(state)  # plain attributes: no Keras tracking of the template a second time

    @property
    def serial_model(self) -> keras.Model:
        """The template: the model whose weights are trained."""
        return self._smodel

    @property
    def gdev_list(self) -> List[str]:
        """The devices given (of every worker, ``'/job:worker/task:i/device:GPU:j'``, for several workers)."""
        return list(self._gdev_list)

    @property
    def local_devices(self) -> List[str]:
        """This process's devices: its replicas, over which the parallel graph splits a batch."""
        return list(self._local_devices)

    def _make_trainer(self):
        if self._cluster_trainer is not None:
            return self._cluster_trainer
        devices = list(self._gdev_list)  # exactly the devices asked for, by name
        if self._usenccl:
            return SyncMultiGPUTrainerReplicated(devices, mode="nccl")
        return SyncMultiGPUTrainerParameterServer(devices, ps_device="cpu" if self._ps_on_cpu else "gpu")

    def compile(self, optimizer="rmsprop", loss=None, metrics=None, loss_weights=None, **kwargs):
        """Keras' ``compile``. Keras 2's ``target_tensors``, ``sample_weight_mode``,
        ``weighted_metrics`` and Keras 3's ``steps_per_execution``, ``jit_compile``... are
        accepted; a warning names each one given (kerastrainer picks the steps per call)."""
        given = sorted(k for k, v in kwargs.items() if v is not None)
        if given:
            logger.warning("%s.compile ignores %s.", type(self).__name__, given)
        self._km = KerasModel(self._smodel, trainer=self._make_trainer())
        self._km.compile(optimizer, loss, metrics=metrics, loss_weights=loss_weights)

    def _compiled(self) -> KerasModel:
        if self._km is None:
            raise RuntimeError("Call compile(optimizer, loss, ...) on the parallel model before fit/evaluate.")
        return self._km

    @property
    def optimizer(self):
        km = self.__dict__.get("_km")
        return km._optimizer if km is not None else None

    @optimizer.setter
    def optimizer(self, value):  # keras.Model.__init__ sets it to None
        if value is not None:
            raise AttributeError("Set the optimizer with compile().")

    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None,
            validation_split=0.0, validation_data=None, shuffle=True, initial_epoch=0,
            steps_per_epoch=None, validation_batch_size=None, **kwargs):
        """Keras' ``fit``: ``batch_size`` is the global batch, split across the devices.

        ``x`` may also be a ``PyDataset`` / Keras 2 generator (``ImageDataGenerator.flow``)
        or a Python generator of ``(x, y)`` batches (give ``steps_per_epoch``). ``y`` may be
        left out when the model was compiled with ``loss=None`` (its ``add_loss`` losses).
        ``validation_steps``: validate on that many batches of ``validation_data``."""
        if validation_split:
            raise ValueError("validation_split is not supported; give validation_data.")
        for name in ("class_weight", "sample_weight"):
            if kwargs.get(name) is not None:
                raise ValueError(f"{name} is not supported by kerastrainer's fit; weight the loss instead.")
        validation_steps = kwargs.pop("validation_steps", None)
        # kerastrainer's callbacks report progress: verbose=0 or 2 cannot be honoured
        _warn_dropped(f"{type(self).__name__}.fit", {"verbose": ("auto", 1, True)}, verbose=verbose, **kwargs)
        data = (x, y) if y is not None else x
        return self._compiled().fit(input=data, validation_data=validation_data, batch_size=batch_size,
                                    max_epoch=epochs, starting_epoch=initial_epoch + 1, shuffle=shuffle,
                                    steps_per_epoch=steps_per_epoch, callbacks=callbacks,
                                    validation_batch_size=validation_batch_size, validation_steps=validation_steps)

    def fit_generator(self, generator, steps_per_epoch=None, epochs=1, verbose=1, callbacks=None,
                      validation_data=None, validation_steps=None, class_weight=None, max_queue_size=10,
                      workers=1, use_multiprocessing=False, shuffle=True, initial_epoch=0):
        """Keras 2's ``fit_generator``: ``fit`` on a generator of global batches."""
        if class_weight is not None:
            raise ValueError("class_weight is not supported by kerastrainer's fit; weight the loss instead.")
        _warn_dropped(f"{type(self).__name__}.fit_generator", {"verbose": (1, True)}, verbose=verbose,
                      max_queue_size=max_queue_size, workers=workers, use_multiprocessing=use_multiprocessing)
        return self.fit(generator, epochs=epochs, callbacks=callbacks, validation_data=validation_data,
                        steps_per_epoch=steps_per_epoch, initial_epoch=initial_epoch, shuffle=shuffle,
                        validation_steps=validation_steps)

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None, steps=None,
                 callbacks=None, return_dict=False, **kwargs):
        """Keras' ``evaluate``: the loss, then the metrics (a dict with ``return_dict=True``)."""
        if sample_weight is not None:
            raise ValueError("sample_weight is not supported by evaluate.")
        _warn_dropped(f"{type(self).__name__}.evaluate", callbacks=callbacks, **kwargs)
        stats = self._compiled().evaluate((x, y) if y is not None else x, batch_size=batch_size, steps=steps,
                                          return_dict=True)
        if return_dict:
            return stats
        values = list(stats.values())
        return values[0] if len(values) == 1 else values

    def evaluate_generator(self, generator, steps=None, **kwargs):
        """Keras 2's ``evaluate_generator``."""
        _warn_dropped(f"{type(self).__name__}.evaluate_generator", {"verbose": (0, False)}, **kwargs)
        return self.evaluate(generator, steps=steps)

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        """The template's predictions (the parallel graph computes the same values)."""
        _warn_dropped(f"{type(self).__name__}.predict", callbacks=callbacks)
        return self._smodel.predict(x, batch_size=batch_size, verbose=0, steps=steps)

    def predict_generator(self, generator, steps=None, **kwargs):
        """Keras 2's ``predict_generator``."""
        _warn_dropped(f"{type(self).__name__}.predict_generator", {"verbose": (0, False)}, **kwargs)
        return self._smodel.predict(generator, steps=steps, verbose=0)

    def predict_on_batch(self, x):
        return self._smodel.predict_on_batch(x)

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

    def get_config(self):
        raise NotImplementedError("ModelMGPU is not serializable; save or serialize the serial model.")


def make_parallel(serial_model: keras.Model, gdev_list: Sequence, ps_device: str = "/cpu:0",
                  usenccl: bool = False, initsync: bool = True, syncopt: bool = False, enqueue: bool = False,
                  model_class=ModelMGPU) -> keras.Model:
    """Data-parallel ``serial_model`` on the devices ``gdev_list`` (keras_experiments' API).

    ``batch_size`` (of ``fit``) is keras_experiments' global batch: it is split over all
    the devices of ``gdev_list``, each computing on ``batch_size / len(gdev_list)``
    samples a step; the gradients are averaged, so any split gives the serial model's update.

    **Several workers.** When ``gdev_list`` names the devices of every worker of a job
    (``'/job:worker/task:0/device:GPU:0', '/job:worker/task:1/device:GPU:0', ...``, as
    keras_experiments' ``get_allworkers_devlist`` gave; :func:`get_allworkers_devlist`
    lists them here), ``fit`` trains with multi-worker data parallelism on the
    ``MultiWorkerTrainer`` this process created first thing (before TensorFlow ran an
    op), under ``srun`` or ``kerastrainer-run -np N``: every worker runs the program,
    its replicas are its own devices in the list, and the gradients are all-reduced
    across the workers. ``batch_size`` is still the global batch of all the listed
    devices: each worker reads every ``N``-th sample, ``batch_size / N`` a step. The list
    must match the cluster (its workers, this worker's task, the devices each trains on:
    one per process); a mismatch, or such a list in a process that is not one worker of
    a job, is a clear error. See docs/multi-node.md.

    Args:
        serial_model: the ``keras.Model``.
        gdev_list: device names (``get_available_gpus()``, or ``['/cpu:0', '/cpu:1']``),
            ``tf.DeviceSpec`` objects or device ids; or every worker's devices (above).
            With fewer than 2 devices the serial model is returned unchanged.
        ps_device: where gradients are reduced when ``usenccl`` is False.
        usenccl: all-reduce with ``SyncMultiGPUTrainerReplicated`` (NCCL on GPUs; a host
            reduction without GPUs).
        initsync, syncopt, enqueue: accepted; without a TF2 meaning (replicas always
            start from the same weights, gradients are always averaged, the input is
            always an in-graph queue), so a warning names each one set away from its default.
        model_class: the class to build (a :class:`ModelMGPU` subclass).

    Example::

        pmodel = make_parallel(model, ['/gpu:0', '/gpu:1'])

        # srun -n 2 python train.py: 2 workers, one GPU each
        trainer = MultiWorkerTrainer()                        # first thing in the script
        ...
        pmodel = make_parallel(model, get_allworkers_devlist())
        pmodel.compile(...)
        pmodel.fit(x, y, batch_size=64)                       # 32 samples a step on each worker
    """
    gdev_list = list(gdev_list)
    if len(gdev_list) < 2:
        logger.info("make_parallel: %d device(s); the serial model is used unchanged.", len(gdev_list))
        return serial_model
    _warn_knobs("make_parallel", initsync=initsync, syncopt=syncopt, enqueue=enqueue)
    kwargs = dict(serial_model=serial_model, gdev_list=gdev_list, ps_device=ps_device)
    if usenccl:
        kwargs["usenccl"] = True
    return model_class(**kwargs)


def multi_gpu_model(model: keras.Model, gpus: Union[None, int, Sequence[int]] = None, cpu_merge: bool = True,
                    cpu_relocation: bool = False) -> keras.Model:
    """Keras 2's ``keras.utils.multi_gpu_model``: ``model`` replicated on ``gpus`` devices.

    ``gpus``: None (every device of :func:`get_available_gpus`), an int >= 2, or a list
    of >= 2 device ids. The batch given to ``fit`` is global and split across the
    devices. ``cpu_merge=False`` all-reduces the gradients between the devices instead
    of reducing them on the CPU; ``cpu_relocation`` has no TF2 meaning (warned about).
    Errors are Keras 2's ``ValueError`` s, with its messages.

    Example::

        parallel_model = multi_gpu_model(model, gpus=2)
        parallel_model.compile(loss='categorical_crossentropy', optimizer='rmsprop')
        parallel_model.fit(x, y, epochs=20, batch_size=256)
        model.save('my_model.keras')        # the template holds the trained weights
    """
    pool = _device_pool()
    if gpus is None:  # only None means every device: gpus=[] or 0 is an error below, as in Keras 2
        gpus = len(pool)
    if isinstance(gpus, (list, tuple)):
        if len(gpus) <= 1:
            raise ValueError("For multi-gpu usage to be effective, call `multi_gpu_model` with `len(gpus) >= 2`. "
                             f"Received: `gpus={gpus}`")
        target_ids = list(gpus)
    elif isinstance(gpus, int) and not isinstance(gpus, bool):
        if gpus <= 1:
            raise ValueError("For multi-gpu usage to be effective, call `multi_gpu_model` with `gpus >= 2`. "
                             f"Received: `gpus={gpus}`")
        target_ids = list(range(gpus))
    else:
        raise TypeError(f"gpus must be None, an int or a list of device ids; got {gpus!r}.")
    kind = "gpu" if _physical_gpus() else "cpu"
    target_devices = ["/cpu:0"] + [f"/{kind}:{i}" for i in target_ids]
    if any(not isinstance(i, int) or not 0 <= i < len(pool) for i in target_ids):
        raise ValueError(f"To call `multi_gpu_model` with `gpus={gpus}`, we expect the following devices to be "
                         f"available: {target_devices}. However this machine only has: {_available_devices()}. "
                         "Try reducing `gpus`.")
    _warn_knobs("multi_gpu_model", cpu_relocation=cpu_relocation)
    return ModelMGPU(serial_model=model, gdev_list=[pool[i] for i in target_ids],
                     ps_device="/cpu:0", usenccl=not cpu_merge)


class ModelKerasMGPU(keras.Model):
    """keras_experiments' wrapper around :func:`multi_gpu_model` (the keras#2436 pattern).

    It copies the parallel model's state and routes every ``load``/``save`` method to
    the serial model, which holds the weights.

    Example::

        model = ModelKerasMGPU(serial_model, gpus=get_available_gpus(2, list_type=GPUListType.int_id))
    """

    def __init__(self, ser_model: keras.Model, gpus, *args, **kwargs):  # pylint: disable=super-init-not-called
        pmodel = multi_gpu_model(ser_model, gpus, *args, **kwargs)
        self.__dict__.update(pmodel.__dict__)  # a copy constructor, as in keras_experiments
        self.__dict__["_smodel"] = ser_model

    def __getattribute__(self, attrname):
        if "load" in attrname or "save" in attrname:
            return getattr(object.__getattribute__(self, "_smodel"), attrname)
        return super().__getattribute__(attrname)


def print_mgpu_modelsummary(model: keras.Model) -> None:
    """Print the summary of a multi-GPU model, then of each model among its layers (the template).

    Example::

        print_mgpu_modelsummary(make_parallel(model, get_available_gpus()))
    """
    print(f"\nMULTI-GPU MODEL: {model.name}")
    model.summary()
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            lines: List[str] = []
            layer.summary(print_fn=lambda line, *a, **k: lines.append(line))
            print(f"\n\tSUBMODEL SUMMARY: {layer.name}")
            print("\t" + "\n\t".join("\n".join(lines).splitlines()) + "\n")

