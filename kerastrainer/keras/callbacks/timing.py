"""Keras callbacks that time training: per-batch and per-epoch times, samples per second.

keras_experiments' ``keras_exp.callbacks.timing`` (from rossumai/keras-multi-gpu), for
``keras.Model.fit`` and for kerastrainer's loop (``KerasModel.fit``, ``ModelMGPU.fit``),
where one "batch" is one step: their batch hooks make the trainer run one step per
``tf.function`` call, so the times are per step, as keras_experiments measured them.

Example::

    model.fit(x, y, batch_size=256, callbacks=[BatchTiming(), SamplesPerSec(256)])
"""
from __future__ import annotations

import time
from typing import List, Optional

import keras
import numpy as np

__all__ = ["BatchTiming", "SamplesPerSec"]


class BatchTiming(keras.callbacks.Callback):
    """Median batch time and epoch time of each epoch, and overall figures after training (seconds).

    Attributes ``all_batch_times`` and ``all_epoch_times`` keep the measurements.

    Example::

        model.fit(x, y, callbacks=[BatchTiming()])
    """

    def __init__(self):
        super().__init__()
        self.train_beg_time: Optional[float] = None
        self.all_batch_times: List[float] = []
        self.all_epoch_times: List[float] = []
        self.epoch_batch_times: List[float] = []
        self._epoch_start_time: Optional[float] = None
        self.start_time: Optional[float] = None

    def on_train_begin(self, logs=None):
        self.train_beg_time = time.time()
        self.all_batch_times = []
        self.all_epoch_times = []

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch_batch_times = []
        self._epoch_start_time = time.time()

    def on_train_batch_begin(self, batch, logs=None):
        self.start_time = time.time()

    def on_train_batch_end(self, batch, logs=None):
        if self.start_time is None:
            return
        elapsed = time.time() - self.start_time
        self.epoch_batch_times.append(elapsed)
        self.all_batch_times.append(elapsed)

    def on_epoch_end(self, epoch, logs=None):
        epoch_time = time.time() - self._epoch_start_time
        self.all_epoch_times.append(epoch_time)
        median = float(np.median(self.epoch_batch_times)) if self.epoch_batch_times else 0.0
        overhead = epoch_time - median * len(self.epoch_batch_times)
        print(f"\nEpoch timing - batch (median): {median:0.5f}, epoch: {epoch_time:0.5f} (sec), "
              f"overhead (epoch - steps*batch): {overhead:0.5f} (sec)")

    def on_train_end(self, logs=None):
        if not self.all_epoch_times:
            return
        train_time = time.time() - self.train_beg_time
        print(f"\nOverall - batch (median): {float(np.median(self.all_batch_times or [0.0])):0.5f}, "
              f"epoch (median): {float(np.median(self.all_epoch_times)):0.5f} (sec), "
              f"Total Train: {train_time:0.5f} (sec), "
              f"Total Train - 1st epoch: {train_time - self.all_epoch_times[0]:0.5f} (sec)\n")


class SamplesPerSec(keras.callbacks.Callback):
    """Samples per second of each batch (``batch_size`` / batch time); the median printed each epoch.

    Args:
        batch_size: the global batch size.

    Example::

        model.fit(x, y, batch_size=256, callbacks=[SamplesPerSec(256)])
    """

    def __init__(self, batch_size: int, **kwargs):
        super().__init__(**kwargs)
        self.batch_size = batch_size
        self.all_samples_per_sec: List[float] = []
        self.start_time: Optional[float] = None

    def on_train_begin(self, logs=None):
        self.all_samples_per_sec = []

    def on_train_batch_begin(self, batch, logs=None):
        self.start_time = time.time()

    def on_train_batch_end(self, batch, logs=None):
        if self.start_time is None:
            return
        elapsed = max(time.time() - self.start_time, 1e-9)
        self.all_samples_per_sec.append(self.batch_size / elapsed)

    def on_epoch_end(self, epoch, logs=None):
        if self.all_samples_per_sec:
            print(f"\nSamples/sec: {float(np.median(self.all_samples_per_sec)):0.2f}")
