"""Monitors: where training statistics go (the group and base class are ``monitor_group.py``;
this module, at tensorpack's path, has the destinations and re-exports those two).

Callbacks report statistics through ``trainer.monitors`` (a :class:`Monitors`
group): ``put_scalar``, ``put_histogram``, ``put_image``, ``put_event``. The group
remembers every scalar (``get_latest``, ``get_history``) and hands each item to its
members, the :class:`TrainingMonitor` s:

- :class:`ScalarPrinter`: a console table of the epoch's scalars,
- :class:`JSONWriter`: ``stats.json`` in the log directory, one entry per epoch,
- :class:`TFEventWriter`: TensorBoard event files in the log directory.

Monitors that write files skip their work when no log directory is set
(``logger.set_logger_dir``), with one warning.

Example::

    monitors = Monitors([TFEventWriter(), JSONWriter(), ScalarPrinter()])
    trainer.monitors = monitors      # the trainer registers the group, last
    ...
    trainer.monitors.put_scalar('validation_error', 0.03)
    trainer.monitors.get_latest('validation_error')        # 0.03
    trainer.monitors.get_history('validation_error')       # [(global_step, 0.03)]
"""
from __future__ import annotations

import json
import math
import numbers
import os
import re
import time
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from ..utils import logger
from ..utils.casting import whole_number
from .fileio import atomic_write_text
from .monitor_group import Monitors, TrainingMonitor

__all__ = ["TrainingMonitor", "Monitors", "ScalarPrinter", "JSONWriter", "TFEventWriter", "MonitorBase",
           "SendMonitorData", "CometMLMonitor"]


def _compile(patterns: Optional[Sequence[str]]):
    if patterns is None:
        return None
    if isinstance(patterns, str):
        patterns = [patterns]
    return [re.compile(p) for p in patterns]


class ScalarPrinter(TrainingMonitor):
    """Print the scalars as a table on the console (and log file).

    Args:
        enable_step: print the scalars put since the last print after each train call.
        enable_epoch: print them at the end of each epoch.
        whitelist: regular expressions; print only the names that fully match one.
        blacklist: regular expressions; never print names that fully match one.

    Example::

        ScalarPrinter(blacklist=[r'throughput/.*'])
    """

    _chief_only = True

    def __init__(self, enable_step: bool = False, enable_epoch: bool = True,
                 whitelist: Optional[Sequence[str]] = None, blacklist: Optional[Sequence[str]] = None):
        self._enable_step = bool(enable_step)
        self._enable_epoch = bool(enable_epoch)
        self._whitelist = _compile(whitelist)
        self._blacklist = _compile(blacklist) or []
        self._stats: Dict[str, float] = {}

    def _wanted(self, name: str) -> bool:
        if self._whitelist is not None and not any(p.fullmatch(name) for p in self._whitelist):
            return False
        return not any(p.fullmatch(name) for p in self._blacklist)

    def process_scalar(self, name, val):
        if self._wanted(name):
            self._stats[name] = val

    def _print(self) -> None:
        if not self._stats:
            return
        from tabulate import tabulate
        rows = [(k, f"{v:.5g}") for k, v in sorted(self._stats.items())]
        table = tabulate(rows, headers=["statistic", "value"], tablefmt="simple", disable_numparse=True)
        logger.info("Epoch %d, global step %d:\n%s", self.epoch_num, self.global_step, table)
        self._stats = {}

    def _trigger_step(self):
        # the epoch's last call is printed by trigger_epoch
        if self._enable_step and self.local_step < self.trainer.steps_per_epoch:
            self._print()

    def _trigger_epoch(self):
        if self._enable_epoch:
            self._print()
        self._stats = {}


class JSONWriter(TrainingMonitor):
    """Write ``stats.json`` in the log directory: a list with one dict per epoch.

    Each entry has ``epoch_num``, ``global_step`` and the last value of every scalar
    put during that epoch. The file is replaced atomically at each epoch end. When a
    run resumes in the same directory, the existing entries are kept, except those
    past the trainer's current global step.

    Example::

        stats = JSONWriter.load_existing_json('train_log/mnist')
        print(stats[-1]['validation_error'])
    """

    FILENAME = "stats.json"
    _chief_only = True

    def __init__(self):
        self._dir: Optional[str] = None
        self._stats: List[Dict[str, Any]] = []
        self._stat_now: Dict[str, float] = {}

    @staticmethod
    def load_existing_json(dir: Optional[str] = None) -> Optional[List[Dict[str, Any]]]:
        """The entries of ``<dir>/stats.json`` (the log directory by default), or None if absent.

        Raises ValueError naming the file if it is not a JSON list.
        """
        dir = dir or logger.get_logger_dir()
        if dir is None:
            return None
        fname = os.path.join(dir, JSONWriter.FILENAME)
        if not os.path.isfile(fname):
            return None
        with open(fname, encoding="utf-8") as f:
            try:
                stats = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"{fname} is not valid JSON ({e}); move it away to start afresh.") from e
        if not isinstance(stats, list):
            raise ValueError(f"{fname} should hold a JSON list of per-epoch dicts, got {type(stats).__name__}.")
        return stats

    @staticmethod
    def load_existing_epoch_number(dir: Optional[str] = None) -> Optional[int]:
        """The ``epoch_num`` of the last entry of ``<dir>/stats.json``, or None."""
        stats = JSONWriter.load_existing_json(dir)
        if not stats:
            return None
        try:
            return int(stats[-1]["epoch_num"])
        except (KeyError, TypeError, ValueError):
            return None

    def _setup_graph(self):
        self._dir = self._resolve_dir()

    def _before_train(self):
        if self._dir is None:
            return
        try:
            stats = self.load_existing_json(self._dir)
        except ValueError as e:
            logger.warn("JSONWriter: %s Starting a new stats.json.", e)
            stats = None
        if not stats:
            return
        gs = self.global_step
        kept = [s for s in stats if isinstance(s, dict) and int(s.get("global_step", 0)) <= gs]
        if len(kept) != len(stats):
            logger.info("JSONWriter: dropped %d entries of stats.json past global step %d.",
                        len(stats) - len(kept), gs)
        logger.info("JSONWriter: found %d earlier entries in stats.json; appending.", len(kept))
        self._stats = kept

    def process_scalar(self, name, val):
        self._stat_now[name] = val

    def _trigger_epoch(self):
        if self._dir is None:
            self._stat_now = {}
            return
        entry = {"epoch_num": self.epoch_num, "global_step": self.global_step}
        entry.update(self._stat_now)
        self._stat_now = {}
        self._stats.append(entry)
        atomic_write_text(os.path.join(self._dir, self.FILENAME), json.dumps(self._stats))

    @property
    def stats(self) -> List[Dict[str, Any]]:
        """The entries written so far (including those loaded at resume)."""
        return list(self._stats)


class TFEventWriter(TrainingMonitor):
    """Write TensorBoard event files: scalars, histograms, images and raw summaries.

    Args:
        logdir: where to write; the log directory by default.
        max_queue: events buffered before a write (a whole number >= 1).
        flush_secs: the longest time between flushes, in seconds; also flushed at each epoch end.
            TF's writer counts whole milliseconds: it is rounded down to them (flushes are never
            further apart than asked), and under one millisecond is an error.
        max_images: the most images written per ``put_image`` (the first ones of an NHWC batch);
            None writes them all. Each image name that loses images to it is logged once.

    Example::

        monitors = [TFEventWriter(), JSONWriter(), ScalarPrinter()]
    """

    _chief_only = True

    def __init__(self, logdir: Optional[str] = None, max_queue: int = 10, flush_secs: float = 120,
                 max_images: Optional[int] = None):
        self._max_queue = whole_number(max_queue, "TFEventWriter(max_queue=...)", minimum=1)
        if isinstance(flush_secs, bool) or not isinstance(flush_secs, numbers.Real):
            raise TypeError(f"TFEventWriter(flush_secs=...) must be a number of seconds, got {flush_secs!r}.")
        if not math.isfinite(flush_secs) or flush_secs < 0.001:
            raise ValueError(f"TFEventWriter(flush_secs=...) must be finite and at least 0.001, got {flush_secs!r}: "
                             "TF's writer flushes at whole milliseconds.")
        self._flush_millis = int(flush_secs * 1000)   # rounded down: never flushes later than asked
        self._max_images = None if max_images is None \
            else whole_number(max_images, "TFEventWriter(max_images=...)", minimum=1)
        self._logdir_arg = logdir
        self._writer = None
        self.logdir: Optional[str] = None
        self._pending: Dict[int, list] = {}
        self._num_pending = 0
        self._last_write = time.time()

    def _setup_graph(self):
        import tensorflow as tf
        self.logdir = self._resolve_dir(self._logdir_arg)
        if self.logdir is not None:
            self._writer = tf.summary.create_file_writer(
                self.logdir, max_queue=self._max_queue, flush_millis=self._flush_millis)

    def process_scalar(self, name, val):
        # Scalars arrive after every train call; writing each through tf.summary costs
        # several eager ops, so they are buffered and written a step at a time.
        if self._writer is None:
            return
        self._pending.setdefault(self.global_step, []).append((name, float(val)))
        self._num_pending += 1
        if self._num_pending >= 1000 or time.time() - self._last_write > 5.0:
            self._write_pending()

    def _write_pending(self):
        import tensorflow as tf
        if self._pending:
            with self._writer.as_default():
                for step, values in sorted(self._pending.items()):
                    summary = tf.compat.v1.Summary(
                        value=[tf.compat.v1.Summary.Value(tag=n, simple_value=v) for n, v in values])
                    tf.summary.experimental.write_raw_pb(summary.SerializeToString(), step=step)
        self._pending = {}
        self._num_pending = 0
        self._last_write = time.time()

    # TensorBoard's tf.summary.histogram one-hot encodes every value (30 doubles each): VGG-16's fc6/W
    # (103M values) needs 25 GB. Past this size the 30 buckets are counted here, the same buckets.
    HISTOGRAM_IN_NUMPY_ABOVE = 1 << 20

    def process_histogram(self, name, values):
        if self._writer is None:
            return
        import tensorflow as tf
        arr = np.asarray(values)
        with self._writer.as_default():
            if arr.size <= self.HISTOGRAM_IN_NUMPY_ABOVE:
                tf.summary.histogram(name, values, step=self.global_step)
                return
            tf.summary.write(name, _histogram_buckets(arr), step=self.global_step,
                             metadata=tf.compat.v1.SummaryMetadata(
                                 plugin_data=tf.compat.v1.SummaryMetadata.PluginData(plugin_name="histograms")))

    def process_image(self, name, img):
        if self._writer is None:
            return
        import tensorflow as tf
        keep = len(img) if self._max_images is None else min(len(img), self._max_images)
        if keep < len(img):
            self._warn_dropped_images(name, len(img), keep)
        with self._writer.as_default():
            tf.summary.image(name, img, step=self.global_step, max_outputs=keep)

    def _warn_dropped_images(self, name: str, got: int, keep: int) -> None:
        warned = self.__dict__.setdefault("_dropped_image_names", set())
        if name not in warned:
            warned.add(name)
            logger.warning("TFEventWriter: put_image(%r) gave %d images; only the first %d are written "
                           "(TFEventWriter(max_images=%d); max_images=None writes them all). Said once per name.",
                           name, got, keep, self._max_images)

    def process_event(self, event):
        if self._writer is None:
            return
        import tensorflow as tf
        summary = getattr(event, "summary", None)
        if summary is None and hasattr(event, "value"):  # a Summary proto itself
            summary = event
        if summary is None or not summary.value:
            return
        step = int(getattr(event, "step", 0) or self.global_step)
        with self._writer.as_default():
            tf.summary.experimental.write_raw_pb(summary.SerializeToString(), step=step)

    def _trigger_epoch(self):
        if self._writer is not None:
            self._write_pending()
            self._writer.flush()

    def _after_train(self):
        if self._writer is not None:
            self._write_pending()
            self._writer.close()
            self._writer = None


MonitorBase = TrainingMonitor   # tensorpack's name of the base class


class SendMonitorData(TrainingMonitor):
    """Run the shell ``command`` formatted with the values of the scalars ``names``
    (``command.format(**{name: value})``) once all of them have arrived since the last run
    (tensorpack's semantics); a failing command is logged.

    Example::

        SendMonitorData('echo "{val_accuracy} {cost}" >> /tmp/stats', ['val_accuracy', 'cost'])
    """

    def __init__(self, command: str, names):
        self.command = command
        self.names = [names] if isinstance(names, str) else list(names)
        self._values: Dict[str, float] = {}

    def process_scalar(self, name: str, val: float) -> None:
        if name in self.names:
            self._values[name] = val
        if len(self._values) == len(self.names):
            import subprocess
            cmd = self.command.format(**self._values)
            self._values = {}
            ret = subprocess.call(cmd, shell=True)
            if ret != 0:
                logger.error("SendMonitorData: command %s failed with exit status %d", cmd, ret)


class CometMLMonitor(TrainingMonitor):
    """Send scalars and images to comet.ml (the ``comet_ml`` package; its ``Experiment``).

    Args:
        experiment: a ``comet_ml.Experiment``; made from ``**kwargs`` (``api_key=...``...) if None.
        tags: tags added to the experiment.

    Example::

        monitors = DEFAULT_MONITORS() + [CometMLMonitor(api_key='...', project_name='mnist')]
    """

    _chief_only = True

    def __init__(self, experiment=None, tags=None, **kwargs):
        if experiment is None:
            try:
                import comet_ml
            except ImportError:
                raise ImportError("CometMLMonitor needs the comet_ml package: pip install comet_ml "
                                  "(or give experiment=).") from None
            experiment = comet_ml.Experiment(**kwargs)
        elif kwargs:
            raise ValueError(f"CometMLMonitor: give experiment= or its arguments {sorted(kwargs)}, not both.")
        self.experiment = experiment
        if tags:
            experiment.add_tags(list(tags))

    def process_scalar(self, name: str, val: float) -> None:
        self.experiment.log_metric(name, val, step=self.global_step)

    def process_image(self, name: str, img: np.ndarray) -> None:
        for i, im in enumerate(img):
            self.experiment.log_image(im, name=f"{name}_step{self.global_step}_{i}", step=self.global_step)

    def _after_train(self):
        self.experiment.end()


def _histogram_buckets(arr: np.ndarray, bucket_count: int = 30) -> np.ndarray:
    """TensorBoard's histogram tensor of ``arr``: ``[k, 3]`` rows of (left edge, right edge, count),
    ``bucket_count`` equal buckets from the minimum to the maximum (one bucket when all are equal)."""
    flat = arr.astype(np.float64, copy=False).ravel()
    flat = flat[np.isfinite(flat)]   # NaN and inf have no bucket
    if flat.size == 0:
        return np.zeros((0, 3))
    lo, hi = float(flat.min()), float(flat.max())
    if lo == hi:
        return np.array([[lo, hi, float(flat.size)]])
    counts, edges = np.histogram(flat, bins=bucket_count, range=(lo, hi))
    return np.stack([edges[:-1], edges[1:], counts.astype(np.float64)], axis=1)
