"""StagingInput: prefetch each tower's next batch onto its device while the step runs."""
from __future__ import annotations

import itertools
from typing import Optional

import tensorflow as tf

from ..callbacks.base import Callback
from .base import InputSource

__all__ = ["StagingInput"]

_ids = itertools.count()


def _device_kind(device: str) -> str:
    return tf.DeviceSpec.from_string(device).device_type or "CPU"


class _PrimeStages(Callback):
    """Fill every tower's staging area before the first step."""

    _chief_only = False

    def __init__(self, staging: "StagingInput"):
        self.staging = staging

    def _before_train(self):
        self.staging.prime(self.trainer.strategy)


class StagingInput(InputSource):
    """Wrap an InputSource so that each step uses a batch already copied to its device.

    Each step takes the batch staged by an earlier step and stages the next one,
    so the host-to-device copy overlaps with computation (tensorpack's StagingInput,
    on TF's ``Stage``/``Unstage`` ops). On CPU devices there is no copy to hide and
    it passes the wrapped input through unchanged, unless ``force=True``.

    Args:
        input: the InputSource to prefetch from (e.g. a QueueInput).
        nr_stage: batches kept in flight per tower.
        force: stage even on CPU devices (for testing the mechanism).

    Example::

        data = StagingInput(QueueInput(df), nr_stage=1)
    """

    def __init__(self, input: InputSource, nr_stage: int = 1, force: bool = False):  # noqa: A002
        if not isinstance(input, InputSource):
            raise TypeError(f"StagingInput wraps an InputSource; got {type(input).__name__}")
        if input.requires_feed:
            raise ValueError("StagingInput cannot wrap FeedInput (it has no in-graph tensors).")
        self.input = input
        self.nr_stage = int(nr_stage)
        self.force = force
        self._name = f"kerastrainer_staging_{next(_ids)}"
        self._active: Optional[bool] = None

    @property
    def batch_size(self):
        return self.input.batch_size

    def _setup(self, specs):
        self.input.setup(specs)

    def size(self) -> int:
        return self.input.size()

    def get_callbacks(self):
        return self.input.get_callbacks() + [_PrimeStages(self)]

    def close(self) -> None:
        self.input.close()

    def raise_pending_error(self) -> None:
        self.input.raise_pending_error()

    def cancel(self) -> None:
        self.input.cancel()

    def fill_level(self):
        return self.input.fill_level()

    def _active_on(self, device: str) -> bool:
        return self.force or _device_kind(device) == "GPU"

    def _stage_name(self, device: str) -> str:
        return f"{self._name}_{device.replace('/', '_').replace(':', '_')}"

    def _current_device(self) -> str:
        # a mirrored replica places its ops on its device; a probe op tells which
        device = tf.constant(0).device
        if device:
            return device
        gpus = tf.config.list_logical_devices("GPU")
        return gpus[0].name if gpus else "/device:CPU:0"

    def _stage(self, device: str):
        tensors = self.input.get_input_tensors()
        with tf.device(device):
            tf.raw_ops.Stage(values=tensors, shared_name=self._stage_name(device), capacity=self.nr_stage + 1)

    def prime(self, strategy) -> None:
        """Stage ``nr_stage`` batches on every tower (called once before training)."""
        def prime_replica():
            device = self._current_device()
            if self._active_on(device):
                for _ in range(self.nr_stage):
                    self._stage(device)
            return tf.constant(0)

        strategy.run(tf.function(prime_replica))
        self._active = True

    def _get_input_tensors(self):
        device = self._current_device()
        if not self._active_on(device):
            return self.input.get_input_tensors()
        specs = self.input_signature
        with tf.device(device):
            tensors = tf.raw_ops.Unstage(dtypes=[s.dtype for s in specs], shared_name=self._stage_name(device),
                                         capacity=self.nr_stage + 1)
        tensors = self.set_shapes(list(tensors))
        # stage the next batch after this one was taken; the copy runs beside the step
        with tf.control_dependencies([tensors[0]]):
            self._stage(device)
        return tensors
