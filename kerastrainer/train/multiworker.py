"""MultiWorkerTrainer: one process per device, TF's collective all-reduce across processes.

The role of tensorpack's ``DistributedTrainerReplicated``, built on
``tf.distribute.MultiWorkerMirroredStrategy`` (MWMS). Start one process per device
with ``kerastrainer-run -np N python train.py``, with ``srun`` under SLURM, or with
any tool that sets ``TF_CONFIG``; see docs/multi-node.md.

Workers stay in lock step: a collective op that one worker runs and another does
not would wait forever. So besides the gradients, the workers agree (with small
all-reduces between train calls, never inside them) on the steps of every call
(the chief's choice), on the epoch to start from and the steps per epoch, and on
stopping early when a callback on any worker raises ``StopTraining``.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np
import tensorflow as tf

from .._internals import tf_runtime_started
from ..callbacks.base import StopTraining
from ..tfutils.sessinit import JustCurrentSession
from ..utils import cluster, logger
from ..utils.worker_join import join_workers, resolve_join_timeout
from .base import Trainer

__all__ = ["MultiWorkerTrainer", "WorkerSync"]

_STARTUP_ERROR = (
    "{who} must be created before TensorFlow runs its first op in this process: it configures TF's "
    "runtime ({what}), which is fixed once the runtime starts. Construct the trainer at the top of your "
    "script, before building DataFlows that use TF, models, optimizers or tensors ({err}).")

# the MultiWorkerTrainer of several workers made in this process (TF's collective runtime is set once)
_OF_THIS_PROCESS: List["MultiWorkerTrainer"] = []


class WorkerSync:
    """Agreement between the worker processes of a job, over a sum all-reduce.

    A trainer gives it ``allreduce_sum(np.ndarray) -> np.ndarray`` (the element-wise sum
    over all workers, the same array on each) and gets: the chief's value of a number,
    every worker's values (all-gather), and a logical OR. Every call is a collective:
    all workers must make the same calls in the same order.

    Example::

        sync = WorkerSync(rank, size, allreduce_sum)
        steps = sync.from_chief(local_steps)
    """

    def __init__(self, rank: int, size: int, allreduce_sum):
        self.rank, self.size = int(rank), int(size)
        self._sum = allreduce_sum

    def gather(self, values: Sequence[int]) -> np.ndarray:
        """``(size, len(values))`` int64 array: row ``r`` holds worker ``r``'s values."""
        buf = np.zeros((self.size, len(values)), np.int64)
        buf[self.rank] = np.asarray(values, np.int64)
        return np.asarray(self._sum(buf.reshape(-1)), np.int64).reshape(self.size, len(values))

    def from_chief_and_any(self, value: int, flag: bool) -> tuple:
        """``(the chief's value, True if any worker's flag is set)`` in one all-reduce."""
        out = np.asarray(self._sum(np.array([value if self.rank == 0 else 0, int(bool(flag))], np.int64)))
        return int(out[0]), bool(out[1])


class _SyncedWorkersMixin:
    """The lock-step protocol shared by MultiWorkerTrainer and HorovodTrainer.

    A subclass sets ``self.rank``, ``self.size``, ``self.is_chief`` and provides
    ``_allreduce_sum_numpy`` (a sum over workers of a small int64 array) and
    ``_broadcast_from_chief(variables)``.
    """

    # SIGTERM keeps its default here: a worker stopping alone would leave the others in a
    # collective; a resumed run starts from the last checkpoint
    graceful_sigterm = False

    def _init_sync(self):
        self._sync = WorkerSync(self.rank, self.size, self._allreduce_sum_numpy)
        self._stop_exchanged = False

    def setup_callbacks(self, callbacks, monitors) -> None:
        if not self.is_chief:   # only the chief owns the log directory
            _use_private_log_dir(self.rank)
        super().setup_callbacks(callbacks, monitors)

    # every trainable, optimizer and counter variable: what a checkpoint holds
    def _state_variables(self) -> List:
        seen, out = set(), []
        optimizers = [o.optimizer for o in getattr(self, "objectives", [])] or [self.optimizer]
        groups = [self.model_variables.all_variables] + [list(getattr(o, "variables", [])) for o in optimizers] + \
            [[self.global_step_var, self.epoch_var]]
        for v in (v for g in groups for v in g):
            if id(v) not in seen:
                seen.add(id(v))
                out.append(v)
        return out

    def initialize(self, session_init) -> None:
        """The chief loads weights (``session_init``: SmartInit, auto-resume); all get the chief's."""
        if self.is_chief:
            super().initialize(session_init)
        elif session_init is not None and not isinstance(session_init, JustCurrentSession):
            logger.info("Rank %d does not read %s: it gets every variable from the chief.", self.rank,
                        type(session_init).__name__)
        self._broadcast_from_chief(self._state_variables())
        self.global_step = int(self.global_step_var.numpy())

    def _agree_on_schedule(self, steps_per_epoch: int, starting_epoch: int, max_epoch: int):
        table = self._sync.gather([steps_per_epoch, starting_epoch, max_epoch])
        spe = int(table[:, 0].min())
        if len(set(table[:, 0])) > 1:
            logger.warning("Workers have different steps per epoch %s (shards of unequal size?); all run %d, "
                           "the smallest.", table[:, 0].tolist(), spe)
        start, last = int(table[0, 1]), int(table[0, 2])
        if starting_epoch != start and not self.is_chief:
            logger.info("Rank %d starts at epoch %d, as the chief does.", self.rank, start)
        if len(set(table[:, 2])) > 1:
            logger.warning("Workers have different max_epoch %s; all stop after the chief's %d.",
                           table[:, 2].tolist(), last)
        return spe, start, last

    def _choose_steps(self) -> int:
        # Chief-only callbacks (and 'auto' timing) make the local choice differ per worker:
        # all take the chief's, and learn here whether another worker asked to stop.
        k, stop = self._sync.from_chief_and_any(super()._choose_steps(), False)
        if stop:
            self._stop_exchanged = True
            raise StopTraining("another worker stopped training")
        return k

    def main_loop(self, steps_per_epoch: int, starting_epoch: int, max_epoch: int) -> None:
        spe, start, last = self._agree_on_schedule(steps_per_epoch, starting_epoch, max_epoch)
        self._stop_exchanged = False
        super().main_loop(spe, start, last)
        # Reached on a normal end and after StopTraining (not on errors: peers may be gone).
        # Matches a waiting peer's next _choose_steps, or a peer's own final exchange.
        if not self._stop_exchanged:
            self._sync.from_chief_and_any(0, True)
            self._stop_exchanged = True


def _communication(communication: str, on_gpu: bool):
    impl = tf.distribute.experimental.CommunicationImplementation
    choices = {"auto": impl.NCCL if on_gpu else impl.RING, "nccl": impl.NCCL, "ring": impl.RING}
    if communication not in choices:
        raise ValueError(f"communication must be one of {sorted(choices)}; got {communication!r}")
    if communication == "nccl" and not on_gpu:
        raise ValueError("communication='nccl' needs a GPU; this worker has none. Use 'ring' (or 'auto').")
    return tf.distribute.experimental.CommunicationOptions(implementation=choices[communication])


def _pin_gpu(local_rank: int, who: str) -> int:
    """Make only this worker's GPU visible (one process per device); returns the GPU count (0/1)."""
    gpus = tf.config.list_physical_devices("GPU")  # does not start the runtime
    if len(gpus) <= 1:
        return len(gpus)
    if local_rank >= len(gpus):
        raise ValueError(f"Local rank {local_rank} has no GPU: this machine shows {len(gpus)}. Start at most "
                         f"one worker per GPU on each machine.")
    try:
        tf.config.set_visible_devices(gpus[local_rank], "GPU")
        tf.config.experimental.set_memory_growth(gpus[local_rank], True)
    except RuntimeError as e:
        raise RuntimeError(_STARTUP_ERROR.format(who=who, what="the visible GPU", err=e)) from None
    return 1


def _addresses(resolver) -> List[str]:
    """Every task's ``host:port`` in rank order (the chief first)."""
    jobs = resolver.cluster_spec().as_dict()
    out = []
    for job in ("chief", "worker"):
        tasks = jobs.get(job) or []
        out += [tasks[i] for i in sorted(tasks)] if isinstance(tasks, dict) else list(tasks)
    return out


def _rank_of(resolver) -> int:
    jobs = resolver.cluster_spec().jobs
    if resolver.task_type == "chief":
        return 0
    return int(resolver.task_id) + (1 if "chief" in jobs else 0)


class MultiWorkerTrainer(_SyncedWorkersMixin, Trainer):
    """Synchronous data-parallel training over several processes (one per device).

    The strategy is ``tf.distribute.MultiWorkerMirroredStrategy``, created **in the
    constructor**: it configures TF's collective runtime, which must happen before
    TensorFlow runs any op in the process (the trainer's usual ``_make_strategy`` in
    ``setup_graph`` is too late once a DataFlow, a model or an optimizer touched TF).
    So construct the trainer first thing in the script; the constructor waits until
    every worker is up.

    The cluster comes from ``cluster_resolver`` when given, else from the environment
    (``kerastrainer-run``, ``TF_CONFIG`` or a SLURM ``srun`` step, see
    :mod:`kerastrainer.utils.cluster`). Each worker uses one device: the GPU of its
    local rank (only it is made visible) or the CPU.

    Semantics:

    - The DataFlow batch is **per worker** (tensorpack's per-tower rule): N workers
      take N batches per step and the gradients are averaged (``average=True``) or
      summed over all workers. Give each worker its own data:
      ``shard_dataflow(df)`` / ``shard_list(files)`` from :mod:`kerastrainer.utils.cluster`.
      ``steps_per_epoch`` defaults to the local DataFlow's length; if workers differ,
      all run the smallest.
    - Initial weights are the chief's everywhere: MWMS broadcasts variables' initial
      values from the chief when they are created, and after ``session_init``, which
      runs on the chief alone, every variable (model, optimizer, counters) is
      broadcast from the chief. So ``AutoResumeTrainConfig`` resumes all workers from
      the chief's checkpoint (step, epoch, optimizer state) and no shared filesystem
      is needed.
    - ``is_chief`` is True on rank 0; ``chief_only`` callbacks (progress bar, monitors,
      inference) run there only. Only the chief writes the log directory: on the
      others the trainer switches the logger to a private temporary directory (use
      :func:`~kerastrainer.utils.cluster.set_logger_dir_on_chief` so they never touch
      the chief's one).
    - The workers agree on the steps of each call (the chief's choice), on the epoch
      to start from, and stop together when a callback on any worker raises
      ``StopTraining``.
    - A worker that dies leaves the others blocked in a collective until the launcher
      (``kerastrainer-run``, ``srun --kill-on-bad-exit``) stops them.
    - The constructor waits at most ``join_timeout`` seconds for every worker to start
      (each checks in with rank 0 before TF's runtime starts: TF itself waits forever); then
      it raises :class:`~kerastrainer.utils.worker_join.WorkerJoinError` naming the ranks
      that never came, on rank 0 and on the ranks that did.

    Args:
        communication: ``'auto'`` (NCCL on GPUs, ring on CPU), ``'nccl'`` or ``'ring'``.
        cluster_resolver: a ``tf.distribute.cluster_resolver.ClusterResolver`` to use
            instead of the environment.
        join_timeout: seconds to wait for every worker to start (``math.inf``: no limit);
            default ``$KERASTRAINER_JOIN_TIMEOUT`` (``kerastrainer-run --join-timeout``), else 600.
        **kwargs: the :class:`Trainer` arguments (``steps_per_call``, ``precision``,
            ``jit_compile``, ``average``). ``jit_compile='auto'`` compiles each step's forward
            and backward with XLA on a GPU worker; the collective all-reduce stays outside XLA.

    Example::

        # train.py, started with: kerastrainer-run -np 2 python train.py
        trainer = MultiWorkerTrainer()              # first: before any TF op
        set_logger_dir_on_chief('train_log/run', action='k')
        df = shard_dataflow(get_data())
        launch_train_with_config(AutoResumeTrainConfig(model=Model(), dataflow=df, max_epoch=10), trainer)
    """

    def __init__(self, communication: str = "auto", cluster_resolver=None, join_timeout: Optional[float] = None,
                 **kwargs):
        super().__init__(**kwargs)
        join_timeout = resolve_join_timeout(join_timeout)
        info = cluster.get_cluster_info()
        if cluster_resolver is None and info.size > 1 and not info.workers:
            raise ValueError(f"This process is rank {info.rank} of {info.size} (from {info.source}) but no "
                             "worker addresses are known: start the workers with kerastrainer-run, srun, "
                             "or set TF_CONFIG. (Under horovodrun/mpirun use HorovodTrainer.)")
        n_gpu = _pin_gpu(info.local_rank, "MultiWorkerTrainer")
        options = _communication(communication, on_gpu=n_gpu > 0)
        if cluster_resolver is None and info.workers and info.size > 1:
            cluster_resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
                tf.train.ClusterSpec({"worker": info.workers}), task_type="worker", task_id=info.rank,
                num_accelerators={"GPU": n_gpu}, rpc_layer="grpc")
        if cluster_resolver is not None:
            self.rank = _rank_of(cluster_resolver)
            self.size = sum(len(v) for k, v in cluster_resolver.cluster_spec().as_dict().items()
                            if k in ("chief", "worker"))
        else:
            self.rank, self.size = 0, 1
            logger.warning("MultiWorkerTrainer: a single worker (the environment names no cluster of several "
                           "processes). Start the workers with kerastrainer-run -np N, srun, or set TF_CONFIG.")
        self.is_chief = self.rank == 0
        if self.size > 1 and not _OF_THIS_PROCESS:   # (a later one reuses the collectives set up then)
            if tf_runtime_started():   # (TF's error comes only after the join, which would wait for nothing)
                raise RuntimeError(_STARTUP_ERROR.format(who="MultiWorkerTrainer", what="collective ops",
                                                         err="the runtime is already running"))
            join_workers(_addresses(cluster_resolver), self.rank, join_timeout)
        try:
            self._strategy = tf.distribute.MultiWorkerMirroredStrategy(
                cluster_resolver=cluster_resolver, communication_options=options)
        except RuntimeError as e:
            if "program startup" in str(e) or "initialized" in str(e):
                raise RuntimeError(_STARTUP_ERROR.format(who="MultiWorkerTrainer", what="collective ops",
                                                         err=e)) from None
            raise
        self.num_local_replicas = len(self._strategy.extended.worker_devices)
        self._sum_fn = None
        self._init_sync()
        if self.size > 1:
            _OF_THIS_PROCESS[:] = [self]
        logger.info("MultiWorkerTrainer: rank %d of %d%s, %d replica(s) in sync, %s.", self.rank, self.size,
                    " (chief)" if self.is_chief else "", self._strategy.num_replicas_in_sync,
                    options.implementation.name)

    def _make_strategy(self) -> tf.distribute.Strategy:
        return self._strategy

    @staticmethod
    def of_this_process() -> Optional["MultiWorkerTrainer"]:
        """The MultiWorkerTrainer of several workers created in this process, or None
        (``make_parallel`` trains a list of every worker's devices with it)."""
        return _OF_THIS_PROCESS[0] if _OF_THIS_PROCESS else None

    @property
    def local_devices(self) -> List[str]:
        """This worker's replica devices (``'/job:worker/replica:0/task:1/device:CPU:0'``)."""
        return list(self._strategy.extended.worker_devices)

    @property
    def cluster_resolver(self):
        """The cluster this worker joined (``cluster_spec()``, ``task_type``, ``task_id``)."""
        return self._strategy.cluster_resolver

    # --- collectives between calls --------------------------------------------------------
    def _first_local_replica_mask(self, dtype):
        # with several local replicas only one adds this worker's contribution
        ctx = tf.distribute.get_replica_context()
        return tf.cast(tf.equal(ctx.replica_id_in_sync_group % self.num_local_replicas, 0), dtype)

    def _allreduce_sum_numpy(self, array: np.ndarray) -> np.ndarray:
        if self._sum_fn is None:
            strategy = self._strategy

            @tf.function
            def sum_fn(x):
                def replica_fn():
                    v = tf.identity(x) * self._first_local_replica_mask(x.dtype)
                    return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, v)
                return strategy.experimental_local_results(strategy.run(replica_fn))[0]
            self._sum_fn = sum_fn
        return self._sum_fn(tf.constant(array)).numpy()

    def _broadcast_from_chief(self, variables: List) -> None:
        strategy, chief = self._strategy, self.is_chief

        @tf.function
        def broadcast():
            def replica_fn():
                out = []
                for v in variables:
                    value = tf.convert_to_tensor(v)
                    wire = value if value.dtype != tf.bool else tf.cast(value, tf.int32)
                    mask = self._first_local_replica_mask(wire.dtype) * (1 if chief else 0)
                    out.append(tf.distribute.get_replica_context().all_reduce(
                        tf.distribute.ReduceOp.SUM, tf.identity(wire) * mask))
                return out
            return strategy.experimental_local_results(strategy.run(replica_fn))[0]

        if self.size == 1:
            return
        values = broadcast()
        for v, val in zip(variables, values):
            v.assign(tf.cast(val, v.dtype))
        logger.info("Rank %d: %d variables broadcast from the chief.", self.rank, len(variables))



def _use_private_log_dir(rank: int) -> None:
    """Point a non-chief worker's logger at a temporary directory of its own."""
    from ..utils.cluster import is_private_log_dir, private_log_dir
    current = logger.get_logger_dir()
    if is_private_log_dir(current, rank):
        return  # set_logger_dir (on this rank) or set_logger_dir_on_chief made it
    if current is not None:
        logger.warning("Rank %d had the log directory %s: only the chief writes there; this worker uses "
                       "a temporary one. Call set_logger_dir_on_chief() instead of set_logger_dir() so that "
                       "workers never touch the chief's directory.", rank, current)
    logger.set_logger_dir(private_log_dir(rank))
