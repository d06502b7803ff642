"""Device discovery. TensorFlow is imported only when a function is called."""
from __future__ import annotations

from typing import List, Optional

__all__ = ["get_available_gpus", "get_num_gpu", "get_logical_cpus", "training_devices", "ensure_tower_devices",
           "current_replica_index", "current_device", "device_type"]


def get_available_gpus() -> List[str]:
    """Names of the visible GPUs, e.g. ``['/gpu:0', '/gpu:1']``."""
    import tensorflow as tf
    return [f"/gpu:{i}" for i, _ in enumerate(tf.config.list_logical_devices("GPU"))]


def get_num_gpu() -> int:
    """The number of visible GPUs."""
    return len(get_available_gpus())


def get_logical_cpus() -> List[str]:
    """Names of the logical CPU devices (several when configured, e.g. in tests)."""
    import tensorflow as tf
    return [f"/cpu:{i}" for i, _ in enumerate(tf.config.list_logical_devices("CPU"))]


def current_replica_index() -> int:
    """The index of the replica whose function is being traced or run (0 outside a replica)."""
    import tensorflow as tf
    ctx = tf.distribute.get_replica_context()
    if ctx is None:
        return 0
    rid = tf.get_static_value(ctx.replica_id_in_sync_group)
    return int(rid) if rid is not None else 0


def device_type(device: str) -> str:
    """``'GPU'`` or ``'CPU'`` (the default of a name without a type) for a device name."""
    import tensorflow as tf
    return (tf.DeviceSpec.from_string(device).device_type or "CPU").upper()


def current_device() -> str:
    """The device an op made here runs on: the device scope's (a replica's device while a
    strategy traces it), else TensorFlow's default, the first GPU when there is one."""
    import tensorflow as tf
    if tf.executing_eagerly():   # the `with tf.device(...)` scope, if any (an eager op's own
        from .._internals import eager_device_scope   # placement would say where it landed)
        device = eager_device_scope()
    else:
        device = tf.constant(0.0).device
    if device:
        return device
    gpus = tf.config.list_logical_devices("GPU")
    return gpus[0].name if gpus else "/device:CPU:0"


def training_devices(ids) -> List[str]:
    """Device names for tower ids: GPUs when there are any, else logical CPU devices.

    Raises ValueError naming the available devices when an id does not exist.
    """
    gpus = get_available_gpus()
    pool = gpus if gpus else get_logical_cpus()
    kind = "GPU" if gpus else "logical CPU device"
    bad = [i for i in ids if not (0 <= int(i) < len(pool))]
    if bad:
        raise ValueError(f"Towers on device ids {list(ids)} were asked for, but only {len(pool)} {kind}(s) "
                         f"exist: {pool}. Ask for fewer towers, or call "
                         f"kerastrainer.utils.devices.ensure_tower_devices({len(ids)}) at the top of the script "
                         f"(it splits each {'GPU' if gpus else 'CPU'} into logical devices before TF starts).")
    return [pool[int(i)] for i in ids]


def _gpu_memory_mb() -> List[int]:
    """Total memory of each GPU in MiB, from nvidia-smi (TF can tell only after it started)."""
    import subprocess
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        return [int(float(v)) for v in out.split()]
    except (OSError, subprocess.SubprocessError, ValueError):
        return []


def ensure_tower_devices(num_towers: int, gpu_memory_mb: Optional[int] = None) -> None:
    """Make at least ``num_towers`` devices for towers: logical CPUs, or logical GPUs.

    Without GPUs, splits the CPU into ``num_towers`` logical devices (multi-tower scripts
    run, slowly, on a laptop or in CI). With fewer GPUs than towers, splits each GPU
    into ``ceil(num_towers / gpus)`` logical GPUs of ``gpu_memory_mb`` MiB each (default:
    90% of the GPU's memory, from nvidia-smi, shared out), e.g. two towers on one GPU.
    Must be called before TensorFlow runs its first op; with enough GPUs it does nothing.

    Example::

        ensure_tower_devices(2)   # first thing in the script
        launch_train_with_config(config, SyncMultiGPUTrainerReplicated(2))
    """
    import tensorflow as tf
    gpus = tf.config.list_physical_devices("GPU")
    if num_towers <= 1 or len(gpus) >= num_towers:
        return
    if gpus:
        per_gpu = -(-num_towers // len(gpus))
        if gpu_memory_mb is None:
            total = _gpu_memory_mb()
            if len(total) < len(gpus):
                raise RuntimeError(f"ensure_tower_devices({num_towers}): cannot read the GPUs' memory (nvidia-smi); "
                                   "give gpu_memory_mb=, the memory of each logical GPU in MiB.")
            gpu_memory_mb = int(0.9 * min(total) / per_gpu)
        try:
            for gpu in gpus:
                if len(tf.config.get_logical_device_configuration(gpu) or [None]) < per_gpu:
                    tf.config.set_logical_device_configuration(
                        gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=gpu_memory_mb)] * per_gpu)
        except RuntimeError as e:
            raise RuntimeError(f"Cannot split the GPUs into {num_towers} logical GPUs: TensorFlow has already "
                               "started. Call ensure_tower_devices() at the top of the script.") from e
        return
    cpus = tf.config.list_physical_devices("CPU")
    try:
        if len(tf.config.get_logical_device_configuration(cpus[0]) or [None]) < num_towers:
            tf.config.set_logical_device_configuration(
                cpus[0], [tf.config.LogicalDeviceConfiguration()] * num_towers)
    except RuntimeError as e:
        raise RuntimeError(f"Cannot make {num_towers} logical CPU devices: TensorFlow has already started. "
                           "Call ensure_tower_devices() at the top of the script.") from e
