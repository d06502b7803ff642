"""HorovodTrainer: one process per GPU, gradients all-reduced with Horovod's core TF ops.

Only ``hvd.init``, ``hvd.rank``, ``hvd.size``, ``hvd.local_rank``, ``hvd.allreduce`` and
``hvd.broadcast`` are used: Horovod's Keras helpers call ``var.ref()``, which Keras 3
variables lack. Horovod's last release (0.28.1) does not build against TF 2.21; where
it is not importable, :class:`~kerastrainer.train.multiworker.MultiWorkerTrainer` is
the tested multi-process trainer (same launch model, TF's own collectives).
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np
import tensorflow as tf

from ..utils import logger
from .base import Trainer
from .multiworker import _pin_gpu, _SyncedWorkersMixin

__all__ = ["HorovodTrainer", "HorovodUnavailableError"]


class HorovodUnavailableError(ImportError):
    """Horovod (``horovod.tensorflow``) cannot be imported in this environment."""


def _import_horovod():
    try:
        import horovod.tensorflow as hvd
    except Exception as e:  # ImportError, or a build of Horovod for another TF (undefined symbols)
        raise HorovodUnavailableError(
            f"HorovodTrainer needs Horovod's TensorFlow ops, but `import horovod.tensorflow` failed ({e}). "
            "Horovod's last release (0.28.1) does not build against TensorFlow 2.21. Use "
            "kerastrainer.MultiWorkerTrainer instead: the same one-process-per-device training on TF's own "
            "collective all-reduce, started with `kerastrainer-run -np N python train.py` or `srun`.") from e
    return hvd


class HorovodTrainer(_SyncedWorkersMixin, Trainer):
    """Data-parallel training with Horovod: one process per GPU, started by ``horovodrun``/``mpirun``.

    - Each process pins the GPU of its ``hvd.local_rank()`` (made the only visible one,
      so construct the trainer before TensorFlow runs any op).
    - After ``session_init`` (run on rank 0 alone: SmartInit, auto-resume), every
      variable, optimizer slots and counters included, is broadcast from rank 0.
    - Each step's gradients are all-reduced with ``hvd.allreduce`` in
      :meth:`_reduce_gradients`: averaged over all processes (``average=True``) or summed.
    - The DataFlow batch is per process; give each its own shard
      (:func:`~kerastrainer.utils.cluster.shard_dataflow`).
    - Rank 0 is the chief: ``chief_only`` callbacks (monitors, progress bar, inference)
      run there only, and its monitors show rank 0's own cost.
    - Like :class:`~kerastrainer.train.multiworker.MultiWorkerTrainer`, processes agree on
      each call's steps, the starting epoch, and stopping early.

    Args:
        average: average the gradients over processes (True) or sum them.
        compression: a ``hvd.Compression`` (``hvd.Compression.fp16`` halves the bytes on the
            wire); none by default.
        **kwargs: the :class:`Trainer` arguments (``steps_per_call``, ``precision``, ``jit_compile``:
            ``'auto'``, XLA on the pinned GPU, compiles each step's forward and backward; the
            Horovod all-reduce stays outside XLA).

    Raises:
        HorovodUnavailableError: Horovod cannot be imported; the message points to
            ``MultiWorkerTrainer``.

    Example::

        # horovodrun -np 4 -H server1:2,server2:2 python train.py
        trainer = HorovodTrainer()                  # first: before any TF op
        launch_train_with_config(config, trainer)
    """

    def __init__(self, average: bool = True, compression=None, **kwargs):
        hvd = _import_horovod()
        super().__init__(average=average, **kwargs)
        hvd.init()
        self._hvd = hvd
        self.rank, self.size = int(hvd.rank()), int(hvd.size())
        self.is_chief = self.rank == 0
        self.local_rank = int(hvd.local_rank())
        _pin_gpu(self.local_rank, "HorovodTrainer")
        self.compression = compression if compression is not None else hvd.Compression.none
        self.num_local_replicas = 1
        self._init_sync()
        logger.info("HorovodTrainer: rank %d of %d (local rank %d)%s.", self.rank, self.size, self.local_rank,
                    " (chief)" if self.is_chief else "")

    @property
    def num_replicas(self) -> int:
        # every process is one tower of the sync group: the base trainer scales each
        # process's loss by 1/size, and the all-reduce sums
        return self.size

    def _make_strategy(self) -> tf.distribute.Strategy:
        return tf.distribute.get_strategy()

    def _reduce_gradients(self, grads: List[Optional[tf.Tensor]]) -> List[Optional[tf.Tensor]]:
        hvd = self._hvd
        return [None if g is None else
                hvd.allreduce(g, op=hvd.Sum, compression=self.compression, name=f"kerastrainer_grad_{i}")
                for i, g in enumerate(grads)]

    def _allreduce_sum_numpy(self, array: np.ndarray) -> np.ndarray:
        hvd = self._hvd
        return hvd.allreduce(tf.constant(array), op=hvd.Sum, name=f"kerastrainer_sync_{array.size}").numpy()

    def _broadcast_from_chief(self, variables: List) -> None:
        if self.size == 1:
            return
        hvd = self._hvd
        for i, v in enumerate(variables):
            value = tf.convert_to_tensor(v)
            wire = tf.cast(value, tf.int32) if value.dtype == tf.bool else value
            v.assign(tf.cast(hvd.broadcast(wire, root_rank=0, name=f"kerastrainer_bcast_{i}"), v.dtype))
        logger.info("Rank %d: %d variables broadcast from rank 0.", self.rank, len(variables))
