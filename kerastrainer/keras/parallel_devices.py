"""Devices for the Keras multi-GPU API: device lists, and lists naming several workers' devices.

``get_available_gpus()`` (keras_experiments' name) lists this machine's GPUs, or the logical CPU
devices when several were made; ``normalize_devices`` turns ints, names and ``tf.DeviceSpec`` into
device names; ``split_worker_devices`` checks a list of every worker's devices
(``'/job:worker/task:1/device:GPU:0'``, keras_experiments' ``wgdev_list``) against this process's
multi-worker cluster and returns this worker's part. :mod:`kerastrainer.keras.parallel` builds
the parallel model on them.

Example::

    get_available_gpus()                       # ['/gpu:0', '/gpu:1'] (or ['/cpu:0', '/cpu:1'] in CI)
    trainer, every, mine = split_worker_devices(get_allworkers_devlist())
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Union

import tensorflow as tf

from .._internals import host_address_space
from ..train.multiworker import MultiWorkerTrainer
from ..utils import cluster, logger

__all__ = ["ModelMGPUError", "GPUListType", "get_available_gpus", "get_logical_cpus", "normalize_devices", "get_allworkers_devlist",
           "split_worker_devices"]


class ModelMGPUError(RuntimeError, ValueError):
    """A :class:`ModelMGPU` that cannot be built: keras_experiments raised ``RuntimeError`` there (no
    ``serial_model=`` / ``gdev_list=``, fewer than 2 devices); a ``ValueError`` too, for callers of
    earlier kerastrainer versions.

    Example::

        try:
            ModelMGPU(serial_model=model, gdev_list=['/gpu:0'])
        except RuntimeError as e:
            print(e)   # ModelMGPU needs at least 2 devices ...
    """


_MULTIWORKER_HINT = ("Such a list is trained with multi-worker data parallelism by make_parallel / ModelMGPU "
                     "(split_worker_devices checks it against the cluster), in processes started under srun or "
                     "kerastrainer-run; see docs/multi-node.md.")


class GPUListType:
    """What :func:`get_available_gpus` lists (keras_experiments' names).

    Example::

        get_available_gpus(2, list_type=GPUListType.int_id)    # [0, 1]
    """
    name_str = "name_str"   # '/gpu:0'
    int_id = "int_id"       # 0
    dspec = "dspec"         # tf.DeviceSpec


def _local_devices(kind: str) -> List[str]:
    """``'/gpu:i'`` (``'/cpu:i'``) names of this process's logical devices; a multi-worker
    runtime lists the other workers' devices too, which are left out."""
    try:
        host = host_address_space()
    except Exception:  # noqa: BLE001 - no cluster: every device is local
        host = ""
    out = []
    for d in tf.config.list_logical_devices(kind):
        spec = tf.DeviceSpec.from_string(d.name)
        if spec.job is None or not host or d.name.startswith(host + "/"):
            out.append(f"/{kind.lower()}:{spec.device_index}")
    return out


def _physical_gpus() -> List[str]:
    return _local_devices("GPU")


def get_logical_cpus() -> List[str]:
    return _local_devices("CPU")


def _device_pool() -> List[str]:
    """The data-parallel devices: the GPUs, else the logical CPU devices when there are several."""
    gpus = _physical_gpus()
    if gpus:
        return gpus
    cpus = get_logical_cpus()
    return cpus if len(cpus) > 1 else []


def get_available_gpus(ngpus: Optional[int] = None, list_type: str = GPUListType.name_str) -> list:
    """The devices to train on, at most ``ngpus`` of them (None or -1: all).

    The GPUs (``['/gpu:0', '/gpu:1']``); on a machine without GPUs, the logical CPU
    devices when several exist (``['/cpu:0', '/cpu:1', ...]``), else ``[]``.
    ``list_type``: :class:`GPUListType` ``name_str`` (names), ``int_id`` (device ids)
    or ``dspec`` (``tf.DeviceSpec`` objects).

    Example::

        gdev_list = get_available_gpus(2)                       # ['/gpu:0', '/gpu:1']
        ids = get_available_gpus(2, list_type=GPUListType.int_id)  # [0, 1]
    """
    pool = _device_pool()
    if ngpus is not None and int(ngpus) >= 0:
        pool = pool[:int(ngpus)]
    if list_type == GPUListType.int_id:
        return list(range(len(pool)))
    if list_type == GPUListType.dspec:
        return [tf.DeviceSpec.from_string(d) for d in pool]
    if list_type != GPUListType.name_str:
        raise ValueError(f"list_type must be one of GPUListType.name_str, .int_id, .dspec; got {list_type!r}.")
    return pool


def _available_devices() -> List[str]:
    return _physical_gpus() + get_logical_cpus()


def _parse_device(d) -> Union[int, tf.DeviceSpec]:
    """An int id as is; a name or ``tf.DeviceSpec`` as a ``tf.DeviceSpec``."""
    if isinstance(d, bool) or not isinstance(d, (str, int, tf.DeviceSpec)):
        raise TypeError(f"A device must be a name like '/gpu:0', a tf.DeviceSpec or an int id; got {d!r}.")
    if isinstance(d, int):
        return d
    try:
        return d if isinstance(d, tf.DeviceSpec) else tf.DeviceSpec.from_string(d if d.startswith("/") else "/" + d)
    except ValueError as e:
        raise ValueError(f"'{d}' is not a device name ({e}); available: {_available_devices()}.") from None


def _worker_of(spec) -> Optional[tuple]:
    """``(job, task)`` of a device named as another process's (``'/job:worker/task:1/...'``);
    None for a device of this process (no job, or ``localhost`` task 0)."""
    if isinstance(spec, int):
        return None
    if spec.job in (None, "localhost") and spec.task in (None, 0) and spec.replica in (None, 0):
        return None
    return (spec.job or "worker", spec.task or 0)


def _device_name(d) -> str:
    return d.to_string() if isinstance(d, tf.DeviceSpec) else str(d)


def normalize_devices(devices: Sequence[Union[str, int, tf.DeviceSpec]]) -> List[str]:
    """Device names as ``'/gpu:i'`` / ``'/cpu:i'``; ints are device ids in :func:`get_available_gpus`'s pool.

    Raises ValueError listing the available devices when one does not exist, and
    one saying what to do when the list names the devices of several workers (those
    go through :func:`split_worker_devices`).
    """
    devices = list(devices)
    available = _available_devices()
    specs = [_parse_device(d) for d in devices]
    workers = {w for w in map(_worker_of, specs) if w is not None}
    if len(workers) > 1:
        raise ValueError(f"The device list names the devices of {len(workers)} workers: "
                         f"{[_device_name(d) for d in devices]}. " + _MULTIWORKER_HINT)
    pool = _device_pool()
    out = []
    for d, spec in zip(devices, specs):
        if isinstance(spec, int):
            if not 0 <= spec < len(pool):
                raise ValueError(f"Device id {spec} does not exist: the devices are {pool or 'none'} "
                                 "(GPUs, else several logical CPU devices made with ensure_tower_devices).")
            out.append(pool[spec])
            continue
        kind = (spec.device_type or "").lower()
        name = f"/{kind}:{spec.device_index if spec.device_index is not None else 0}"
        if kind not in ("gpu", "cpu") or name not in available:
            raise ValueError(f"Device '{d}' does not exist on this machine. Available devices: {available}. "
                             "(Logical CPU devices are made with tf.config.set_logical_device_configuration "
                             "before TensorFlow starts.)")
        out.append(name)
    dup = sorted({d for d in out if out.count(d) > 1})
    if dup:
        raise ValueError(f"The device list names {dup} more than once: {devices}.")
    return out


# --- the devices of several workers: multi-worker data parallelism ---------------------------------
def _names_several_workers(devices: Sequence) -> bool:
    """Whether ``devices`` names the devices of more than one worker (``'/job:worker/task:i/...'``)."""
    specs = [_parse_device(d) for d in devices]
    return len({w for w in map(_worker_of, specs) if w is not None}) > 1


def _cluster_trainer(what: str) -> MultiWorkerTrainer:
    """This process's MultiWorkerTrainer of several workers; a clear error saying how to start one."""
    trainer = MultiWorkerTrainer.of_this_process()
    if trainer is not None:
        return trainer
    info = cluster.get_cluster_info()
    if info.size > 1:
        raise ModelMGPUError(
            f"{what}: this process is rank {info.rank} of {info.size} (from {info.source}) but no "
            "MultiWorkerTrainer was created in it. Create it first thing in the script, before TensorFlow "
            "runs its first op (building the model runs some): `trainer = MultiWorkerTrainer()`; it joins the "
            "workers, and make_parallel then trains with it.")
    raise ModelMGPUError(
        f"{what}: this process is not one worker of a multi-worker job (no srun step, kerastrainer-run or "
        "TF_CONFIG names several processes). Start one process per worker: `srun -n N python prog.py` under "
        "SLURM, or `kerastrainer-run -np N python prog.py` on one machine, and create `MultiWorkerTrainer()` "
        "first thing in the script. (KerasModel(model, trainer=MultiWorkerTrainer()) is the same without a "
        "device list.)")


def _cluster_tasks(trainer) -> tuple:
    """``([(job, task) of every worker in rank order], (job, task) of this one)`` of the trainer's cluster."""
    resolver = trainer.cluster_resolver
    spec = resolver.cluster_spec()
    tasks = [(job, i) for job in ("chief", "worker") if job in spec.jobs for i in range(spec.num_tasks(job))]
    return tasks, (resolver.task_type, int(resolver.task_id))


def _kind_index(spec) -> tuple:
    return ((spec.device_type or "CPU").upper(), spec.device_index or 0)


def get_allworkers_devlist() -> List[tf.DeviceSpec]:
    """Every worker's devices, as keras_experiments' ``TFClusterManagerFacade.get_allworkers_devlist``
    listed them for :func:`make_parallel`: ``'/job:worker/task:i/device:GPU:0'`` (``CPU:0`` on
    workers without a GPU), worker by worker in rank order.

    The cluster is this process's ``MultiWorkerTrainer`` (create it first, under ``srun``
    or ``kerastrainer-run``). Each worker trains on one device (its GPU, else its CPU);
    every worker is assumed to have the devices this one has, as keras_experiments did.

    Example::

        trainer = MultiWorkerTrainer()                 # first thing in the script
        ...
        wgdev_list = get_allworkers_devlist()          # 2 workers: [.../task:0/device:GPU:0, .../task:1/...]
        model = make_parallel(model_init, wgdev_list)
    """
    trainer = _cluster_trainer("get_allworkers_devlist")
    tasks, _ = _cluster_tasks(trainer)
    local = [_kind_index(tf.DeviceSpec.from_string(d)) for d in trainer.local_devices]
    return [tf.DeviceSpec(job=job, task=task, device_type=kind, device_index=index)
            for job, task in tasks for kind, index in local]


def split_worker_devices(devices: Sequence, trainer: Optional[MultiWorkerTrainer] = None) -> tuple:
    """Check a list of every worker's devices against this process's cluster.

    ``trainer``: the ``MultiWorkerTrainer`` (default: the one this process created).
    Returns ``(trainer, names, local)``: the ``MultiWorkerTrainer``, the list as
    ``'/job:worker/task:i/device:GPU:j'`` names, and this worker's devices as
    ``'/gpu:j'`` / ``'/cpu:j'`` (its replicas). Raises a ValueError naming the list
    and the cluster when they differ (number of workers, this task, devices each), and
    a :class:`ModelMGPUError` (a RuntimeError) saying how to start the workers when this
    process is not one of them.
    """
    devices = list(devices)
    names = [_device_name(d) for d in devices]
    specs = [_parse_device(d) for d in devices]
    by_worker: dict = {}
    for name, spec in zip(names, specs):
        worker = _worker_of(spec)
        if worker is None:
            raise ValueError(f"The device list {names} names devices of several workers and '{name}', which "
                             "names none: name every device with its worker, '/job:worker/task:i/device:GPU:j'.")
        if worker[0] not in ("worker", "chief") or spec.replica not in (None, 0):
            raise ValueError(f"'{name}' in the device list is not a device of a worker (job 'worker' or "
                             "'chief', replica 0): TF2's MultiWorkerMirroredStrategy has no parameter servers "
                             "or other jobs; list the workers' devices only.")
        by_worker.setdefault(worker, []).append(_kind_index(spec))
    twice = sorted(f"{j}:{t}" for (j, t), v in by_worker.items() if len(set(v)) != len(v))
    if twice:
        raise ValueError(f"The device list names a device of {', '.join(twice)} more than once: {names}.")
    trainer = trainer or _cluster_trainer(f"make_parallel with the devices of {len(by_worker)} workers")
    tasks, me = _cluster_tasks(trainer)
    where = f"MultiWorkerTrainer: rank {trainer.rank} of {trainer.size}, tasks {[f'{j}:{t}' for j, t in tasks]}"
    if set(by_worker) != set(tasks):
        listed = sorted(f"{j}:{t}" for j, t in by_worker)
        raise ValueError(f"The device list names {len(by_worker)} workers ({listed}) but this job has "
                         f"{len(tasks)} ({where}): {names}. Give the devices of every worker of the job "
                         "(get_allworkers_devlist() lists them).")
    local = [tf.DeviceSpec.from_string(d) for d in trainer.local_devices]
    mine = by_worker[me]
    counts = {f"{j}:{t}": len(v) for (j, t), v in by_worker.items()}
    if len(set(counts.values())) > 1:
        raise ValueError(f"The device list gives the workers different numbers of devices ({counts}): {names}. "
                         "Every worker trains on as many replicas as the others (MultiWorkerMirroredStrategy).")
    local_rank = _local_rank()
    # a GPU may be named by its number on the machine: the trainer shows each worker only its local rank's
    ok = len(mine) == len(local) and all(
        k == _kind_index(s)[0] and (i == _kind_index(s)[1] or (k == "GPU" and i == local_rank))
        for (k, i), s in zip(mine, local))
    if not ok:
        raise ValueError(f"The device list gives this worker ({me[0]}:{me[1]}, {where}) the devices "
                         f"{[f'{k}:{i}' for k, i in mine]}, but it trains on {[s.to_string() for s in local]}: "
                         f"MultiWorkerTrainer runs one process per device (its GPU, else the CPU). Start one "
                         f"worker per device (srun --ntasks-per-node=<devices per node>, kerastrainer-run -np "
                         f"<devices>) and name one device per worker (get_allworkers_devlist() lists them).")
    canonical = [f"/job:{job}/task:{task}/device:{k}:{i}" for (job, task) in tasks for k, i in by_worker[(job, task)]]
    return trainer, canonical, [f"/{s.device_type.lower()}:{s.device_index or 0}" for s in local]


def _local_rank() -> int:
    return cluster.get_cluster_info().local_rank


def _warn_cluster_knobs(who: str, ps_device, usenccl: bool) -> None:
    """Warn about ps_device / usenccl given with the devices of several workers: the trainer all-reduces."""
    how = ("the gradients are all-reduced across the workers by this process's MultiWorkerTrainer, with the "
           "communication it was created with (MultiWorkerTrainer(communication='nccl'|'ring'))")
    if usenccl:
        logger.warning("%s(usenccl=True) is ignored for the devices of several workers: %s.", who, how)
    if not (isinstance(ps_device, str) and ps_device == "/cpu:0"):  # the default: nothing asked
        logger.warning("%s(ps_device=%r) is ignored for the devices of several workers: %s; there is no "
                       "parameter server.", who, ps_device, how)
