"""The single-machine trainers: one device, or several towers with synchronous updates; and
``NoOpTrainer``, whose steps compute nothing (tensorpack's path: ``tensorpack.train.trainers``)."""
from __future__ import annotations

from typing import Optional, Sequence, Union

import tensorflow as tf

from ..utils import logger
from ..utils.devices import training_devices
from ..utils.tf1_only import tf1_only_class
from .base import Trainer
from .horovod import HorovodTrainer  # noqa: F401 (tensorpack's path of it)
from .interface import launch_train_with_config
from .step_runner import NoOpStepRunner, StepRunner

__all__ = ["SimpleTrainer", "SyncMultiGPUTrainerReplicated", "SyncMultiGPUTrainerParameterServer",
           "SyncMultiGPUTrainer", "NoOpTrainer", "QueueInputTrainer", "HorovodTrainer",
           "AsyncMultiGPUTrainer", "DistributedTrainerParameterServer", "DistributedTrainerReplicated",
           "BytePSTrainer"]


class SimpleTrainer(Trainer):
    """Train on one device (TensorFlow's default placement: the first GPU, else the CPU).

    Example::

        launch_train_with_config(config, SimpleTrainer())
        launch_train_with_config(config, SimpleTrainer(precision='bf16'))  # XLA: 'auto', on on a GPU
    """


def _tower_ids(gpus: Union[int, Sequence[int]]) -> list:
    if isinstance(gpus, int):
        if gpus < 1:
            raise ValueError(f"The number of towers must be positive; got {gpus}")
        return list(range(gpus))
    ids = [int(g) for g in gpus]
    if not ids:
        raise ValueError("The list of tower device ids is empty")
    return ids


def physical_device_index(device: str) -> int:
    """The index of the physical device (of its kind) a logical device is carved from.

    TensorFlow numbers logical devices physical device by physical device, in the order
    of the visible physical devices, each split by ``set_logical_device_configuration``.
    """
    spec = tf.DeviceSpec.from_string(device)
    kind, index = (spec.device_type or "CPU").upper(), spec.device_index or 0
    logical = 0
    for i, phys in enumerate(tf.config.get_visible_devices(kind)):
        logical += len(tf.config.get_logical_device_configuration(phys) or [None])
        if index < logical:
            return i
    raise ValueError(f"{device} is not a logical {kind} device of this process")


def _share_a_physical_gpu(devices: Sequence[str]) -> bool:
    gpus = [physical_device_index(d) for d in devices if tf.DeviceSpec.from_string(d).device_type == "GPU"]
    return len(set(gpus)) < len(gpus)


def _named_devices(names: Sequence[str]) -> list:
    """Device names as given ('/cpu:1', '/gpu:0'), checked against this process's logical devices."""
    def kind_index(name):
        spec = tf.DeviceSpec.from_string(name)
        return spec.device_type, spec.device_index

    logical = tf.config.list_logical_devices()
    have = {kind_index(d.name) for d in logical}
    bad = [n for n in names if kind_index(n) not in have]
    if bad:
        avail = [d.name for d in logical if d.device_type in ("CPU", "GPU")]
        raise ValueError(f"Towers on {list(names)} were asked for, but {bad} do not exist; the logical devices "
                         f"are {avail}. Logical CPU devices are made with "
                         "kerastrainer.utils.devices.ensure_tower_devices(n) before TensorFlow starts.")
    if len(set(n.lower() for n in names)) != len(names):
        raise ValueError(f"Each tower needs its own device; {list(names)} names one twice.")
    return list(names)


class _MirroredTrainer(Trainer):
    """Towers on several local devices under ``tf.distribute.MirroredStrategy``.

    The DataFlow batch is per tower: N towers take N batches per step, and the
    gradients are averaged (``average=True``) or summed.
    """

    def __init__(self, gpus: Union[int, Sequence[int], Sequence[str]], **kwargs):
        super().__init__(**kwargs)
        if not isinstance(gpus, int) and len(gpus) and all(isinstance(g, str) for g in gpus):
            # device names ('/cpu:0', '/cpu:1'): used as given, whatever GPUs the machine has
            self.devices = _named_devices(gpus)
            self.tower_ids = list(range(len(self.devices)))
        else:
            self.tower_ids = _tower_ids(gpus)
            self.devices = training_devices(self.tower_ids)

    def _cross_device_ops(self) -> Optional[tf.distribute.CrossDeviceOps]:
        raise NotImplementedError

    def _make_strategy(self):
        ops = self._cross_device_ops()
        logger.info("%s: %d towers on %s with %s", type(self).__name__, len(self.devices), self.devices,
                    type(ops).__name__)
        return tf.distribute.MirroredStrategy(devices=self.devices, cross_device_ops=ops)


class SyncMultiGPUTrainerReplicated(_MirroredTrainer):
    """Replicated variables, gradients all-reduced across towers (tensorpack's default).

    Args:
        gpus: a number of towers (on the GPUs, or logical CPU devices when there are none),
            a list of device ids, or a list of device names (``['/cpu:0', '/cpu:1']``).
        average: average the gradients (True) or sum them.
        mode: ``'nccl'`` (GPUs), ``'hierarchical'`` (hierarchical copy, for 8-GPU boxes)
            or ``'cpu'`` (reduce on the host); None picks NCCL on GPUs and the host
            reduction on CPU devices. NCCL cannot reduce between logical GPUs carved from
            one physical GPU (towers on ``ensure_tower_devices(2)`` with one GPU): there
            the gradients are reduced on the first tower's GPU instead, as the log says.

    Example::

        launch_train_with_config(config, SyncMultiGPUTrainerReplicated(2))
    """

    def __init__(self, gpus, average: bool = True, mode: Optional[str] = None, **kwargs):
        super().__init__(gpus, average=average, **kwargs)
        if mode not in (None, "nccl", "hierarchical", "cpu"):
            raise ValueError(f"mode must be None, 'nccl', 'hierarchical' or 'cpu'; got {mode!r}")
        self.mode = mode

    def _cross_device_ops(self):
        # the towers' devices decide, not the machine's: towers on CPU devices of a GPU machine
        on_gpu = all(tf.DeviceSpec.from_string(d).device_type == "GPU" for d in self.devices)
        mode = self.mode or ("nccl" if on_gpu else "cpu")
        if mode in ("nccl", "hierarchical") and not on_gpu:
            logger.warning("all-reduce mode %r needs GPUs; reducing on the host instead.", mode)
            mode = "cpu"
        if mode == "nccl" and _share_a_physical_gpu(self.devices):
            # NCCL needs one rank per physical GPU ("Duplicate GPU detected")
            logger.warning("Towers %s share a physical GPU, which NCCL cannot all-reduce between; reducing the "
                           "gradients on %s instead (ReductionToOneDevice).", self.devices, self.devices[0])
            return tf.distribute.ReductionToOneDevice(reduce_to_device=self.devices[0])
        if mode == "nccl":
            return tf.distribute.NcclAllReduce()
        if mode == "hierarchical":
            return tf.distribute.HierarchicalCopyAllReduce()
        return tf.distribute.ReductionToOneDevice(reduce_to_device="/cpu:0")


class SyncMultiGPUTrainerParameterServer(_MirroredTrainer):
    """Gradients reduced on one device (the parameter server) and broadcast back.

    Args:
        gpus: a number of towers, a list of device ids, or a list of device names.
        ps_device: ``'cpu'`` or ``'gpu'`` (the first tower's device).

    Example::

        launch_train_with_config(config, SyncMultiGPUTrainerParameterServer(2, ps_device='cpu'))
    """

    def __init__(self, gpus, ps_device: str = "cpu", average: bool = True, **kwargs):
        super().__init__(gpus, average=average, **kwargs)
        if ps_device not in ("cpu", "gpu"):
            raise ValueError(f"ps_device must be 'cpu' or 'gpu'; got {ps_device!r}")
        self.ps_device = ps_device

    def _cross_device_ops(self):
        target = "/cpu:0" if self.ps_device == "cpu" else self.devices[0]
        return tf.distribute.ReductionToOneDevice(reduce_to_device=target)


def SyncMultiGPUTrainer(gpus, average: bool = True, **kwargs):  # noqa: N802 (tensorpack's name)
    """tensorpack's shortcut: the replicated trainer."""
    return SyncMultiGPUTrainerReplicated(gpus, average=average, **kwargs)


class NoOpTrainer(SimpleTrainer):
    """A trainer whose steps do nothing: the model is built (its variables exist, callbacks
    may use them) and the loop runs the callbacks, counting steps, as tensorpack's.

    ``setup_graph`` takes a ModelDesc, or tensorpack's ``(input_signature, input,
    get_cost_fn, get_opt_fn)``, as every trainer's does.

    Example::

        trainer = NoOpTrainer()
        trainer.setup_graph([tf.TensorSpec([1], name='input')], DummyConstantInput([[1]]),
                            lambda x: tf.reduce_sum(x) + tfv1.get_variable('w', shape=[]),
                            lambda: keras.optimizers.SGD(0.1))
        trainer.train_with_defaults(callbacks=[my_callback], steps_per_epoch=10, max_epoch=3)
    """

    def _make_step_runner(self) -> StepRunner:
        return NoOpStepRunner(self.global_step_var)


def QueueInputTrainer(config, input_queue=None):  # noqa: N802 (tensorpack's name)
    """tensorpack's deprecated single-device trainer on a queue: :class:`SimpleTrainer` training
    ``config`` with its data fed through ``QueueInput`` (``input_queue``: tensorpack's own queue
    object, which TF2 does not have, is refused). Returns the trained trainer.

    Example::

        QueueInputTrainer(TrainConfig(model=Model(), dataflow=df, max_epoch=5))
    """
    if input_queue is not None:
        raise ValueError("QueueInputTrainer(input_queue=...): TF1 queues do not exist in TF2; leave it out "
                         "(QueueInput makes its own queue).")
    return launch_train_with_config(config, SimpleTrainer())


_PS_ADVICE = ("For several GPUs in one process use SyncMultiGPUTrainerReplicated (or "
              "SyncMultiGPUTrainerParameterServer); for several processes or hosts, MultiWorkerTrainer or "
              "HorovodTrainer (docs/multi-node.md).")
AsyncMultiGPUTrainer = tf1_only_class(
    "AsyncMultiGPUTrainer", __name__, "asynchronous updates from several towers have no tf.distribute equivalent",
    "Use SyncMultiGPUTrainerReplicated: every tower's gradients averaged each step.")
DistributedTrainerParameterServer = tf1_only_class(
    "DistributedTrainerParameterServer", __name__, "TF1's distributed parameter-server sessions do not exist",
    _PS_ADVICE)
DistributedTrainerReplicated = tf1_only_class(
    "DistributedTrainerReplicated", __name__, "TF1's distributed replicated sessions do not exist", _PS_ADVICE)
BytePSTrainer = tf1_only_class(
    "BytePSTrainer", __name__, "BytePS does not build for TensorFlow 2.21",
    "Use HorovodTrainer or MultiWorkerTrainer (docs/multi-node.md).")
