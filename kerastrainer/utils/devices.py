"""Device discovery. TensorFlow is imported only when a function is called."""
from __future__ import annotations

from typing import List

__all__ = ["get_available_gpus", "get_num_gpu", "get_logical_cpus", "training_devices", "ensure_tower_devices"]


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
                         f"exist: {pool}. Ask for fewer towers" +
                         ("" if gpus else ", or create logical CPU devices with "
                          "tf.config.set_logical_device_configuration before TF starts") + ".")
    return [pool[int(i)] for i in ids]


def ensure_tower_devices(num_towers: int) -> None:
    """On a machine without GPUs, split the CPU into ``num_towers`` logical devices.

    Lets multi-tower scripts run (slowly) on a laptop or in CI. Must be called before
    TensorFlow runs its first op; with GPUs present it does nothing.
    """
    import tensorflow as tf
    if num_towers <= 1 or tf.config.list_physical_devices("GPU"):
        return
    cpus = tf.config.list_physical_devices("CPU")
    try:
        if len(tf.config.get_logical_device_configuration(cpus[0]) or [None]) < num_towers:
            tf.config.set_logical_device_configuration(
                cpus[0], [tf.config.LogicalDeviceConfiguration()] * num_towers)
    except RuntimeError as e:
        raise RuntimeError(f"Cannot make {num_towers} logical CPU devices: TensorFlow has already started. "
                           "Call ensure_tower_devices() at the top of the script.") from e
