"""Progress and speed: a progress bar, the estimated time left, the throughput.

Example::

    callbacks = [ProgressBar(['cost', 'accuracy']), EstimatedTimeLeft(),
                 ThroughputTracker(samples_per_step=256), GPUUtilizationTracker()]
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import deque
from typing import List, Optional, Sequence

from ..utils import logger
from .base import Callback
from ..utils.casting import whole_number

__all__ = ["ProgressBar", "EstimatedTimeLeft", "ThroughputTracker", "GPUUtilizationTracker", "humanize_seconds"]


def humanize_seconds(sec: float) -> str:
    """A short readable duration: '45 seconds', '3 minutes 5 seconds', '2 hours 1 minute'."""
    sec = max(float(sec), 0.0)
    if sec < 60:
        return f"{sec:.3g} second" + ("" if round(sec, 2) == 1 else "s")
    units = [("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)]
    parts = []
    rest = int(round(sec))
    for name, size in units:
        n, rest = divmod(rest, size)
        if n:
            parts.append(f"{n} {name}" + ("s" if n > 1 else ""))
        if len(parts) == 2:
            break
    return " ".join(parts)


class ProgressBar(Callback):
    """A tqdm progress bar over each epoch's steps, advanced by the steps of each call.

    The bar's postfix shows the named values after each call: entries of
    ``trainer.last_step_outputs`` (the cost, moving summaries: the last call's averages), or,
    as tensorpack fetched them each step, scalar tensors named in the tower
    (``tf.reduce_mean(wrong, name='train_error')``), which the train step then reports too (their
    mean over the call's steps, which a warning says once). On a stream that is not a terminal it refreshes at most
    once a minute, so logs stay short. Chief only.

    Args:
        names: the outputs to show; by default the step's own statistics (``trainer.loss_names``:
            ``'cost'`` of a tower function, a Keras step's ``'loss'`` and metrics). A name the
            train step can fetch from the tower is fetched (a name the tower lacks is then an
            error when the step is traced); a trainer that cannot (a custom trainer's step) shows
            what its outputs have and warns about the rest.

    Example::

        ProgressBar(['cost', 'accuracy'])
    """

    _chief_only = True

    def __init__(self, names: Optional[Sequence[str]] = None):
        if isinstance(names, str):
            names = [names]
        self._given = None if names is None else list(names)
        self._names = []
        self._bar = None
        self._missing_warned = set()
        self._mean_said = False

    def _setup_graph(self):
        own = list(self.trainer.loss_names)
        self._names = own if self._given is None else self._given
        # the step's own statistics are always among the outputs; the rest may be tower tensors
        # ('cost' never is one: asked of a Keras step, which names its loss 'loss', it is warned of)
        wanted = [n for n in self._names if n not in own and n != "cost" and not n.startswith("_")]
        runner = self.trainer.step_runner
        if wanted and runner is not None:
            runner.add_fetches(wanted)

    def _before_epoch(self):
        from tqdm import tqdm
        self._close()
        total = int(self.trainer.steps_per_epoch)
        stream = sys.stderr
        isatty = hasattr(stream, "isatty") and stream.isatty()
        self._bar = tqdm(total=total, initial=min(int(self.local_step), total), file=stream,
                         dynamic_ncols=True, leave=True, smoothing=0.5, ascii=True,
                         mininterval=0.5 if isatty else 60.0,
                         desc=f"Epoch {self.epoch_num}")

    def _trigger_step(self):
        bar = self._bar
        if bar is None:
            return
        outputs = self.trainer.last_step_outputs
        post = {}
        for n in self._names:
            value = outputs.get(n, outputs.get("_fetch:" + n))
            if value is not None and n not in outputs and not self._mean_said and self.trainer.last_call_steps > 1:
                self._mean_said = True
                logger.warn("ProgressBar: '%s' is the mean of its values over the %d steps of each train call "
                            "(tensorpack showed the last step's value); a trainer made with steps_per_call=1 shows "
                            "each step's.", n, self.trainer.last_call_steps)
            if value is not None:
                post[n] = f"{float(value):.4g}"
            elif n not in self._missing_warned:
                self._missing_warned.add(n)
                logger.warn("ProgressBar: '%s' is not among the train call's outputs (%s).",
                            n, ", ".join(sorted(k for k in outputs if not k.startswith("_"))))
        if post:
            bar.set_postfix(post, refresh=False)
        k = max(int(self.trainer.last_call_steps), 1)
        bar.update(min(k, max(bar.total - bar.n, 0)))

    def _close(self):
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _after_epoch(self):
        self._close()

    def _after_train(self):
        # also reached when training ends with an error mid-epoch
        self._close()

    def __del__(self):
        try:
            self._close()
        except Exception:
            pass


class EstimatedTimeLeft(Callback):
    """Log the estimated time to the end of training at each epoch end (a default callback).

    Args:
        last_k_epochs: estimate from the durations of the last k epochs.
        median: use their median (robust to a slow epoch, e.g. one that compiled
            the train function); else their mean.

    Example::

        EstimatedTimeLeft(last_k_epochs=3)
    """

    _chief_only = True

    def __init__(self, last_k_epochs: int = 5, median: bool = True):
        last_k_epochs = whole_number(last_k_epochs, "EstimatedTimeLeft(last_k_epochs=...)", minimum=1)
        self._times = deque(maxlen=last_k_epochs)
        self._median = bool(median)
        self._last = None

    def _before_train(self):
        self._last = time.perf_counter()

    def _trigger_epoch(self):
        now = time.perf_counter()
        if self._last is not None:
            self._times.append(now - self._last)
        self._last = now
        left = int(self.trainer.max_epoch) - int(self.epoch_num)
        if left <= 0 or not self._times:
            return
        ts = sorted(self._times)
        per_epoch = ts[len(ts) // 2] if self._median else sum(ts) / len(ts)
        logger.info("Estimated time left: %s", humanize_seconds(per_epoch * left))


class ThroughputTracker(Callback):
    """Put the epoch's training speed into the monitors at each epoch end.

    ``throughput/steps_per_sec`` always, ``throughput/samples_per_sec`` (images per
    second, for image models) when the samples of a step are known: ``samples_per_step``
    (the global batch: per-tower batch times towers for ModelDesc trainers), or, by
    default, the input's batch size (``InputSource.batch_size``, known for a DataFlow
    behind QueueInput) times the number of towers. Time is counted from
    ``before_epoch`` to ``after_epoch``, so epoch-end work such as validation is left out.
    One of the default callbacks.

    Example::

        ThroughputTracker(samples_per_step=BATCH * num_towers)
    """

    _chief_only = False

    def __init__(self, samples_per_step: Optional[float] = None):
        if samples_per_step is not None and samples_per_step <= 0:
            raise ValueError(f"ThroughputTracker: samples_per_step must be positive, got {samples_per_step}.")
        self._samples_per_step = samples_per_step
        self._start_time = None
        self._start_step = 0
        self._seconds = None
        self._steps = 0

    def _before_epoch(self):
        self._start_time = time.perf_counter()
        self._start_step = int(self.global_step)
        self._seconds = None

    def _after_epoch(self):
        if self._start_time is not None:
            self._seconds = time.perf_counter() - self._start_time
            self._steps = int(self.global_step) - self._start_step

    def _trigger_epoch(self):
        if self._seconds is None or self._seconds <= 0 or self._steps <= 0:
            return
        steps_per_sec = self._steps / self._seconds
        self.trainer.monitors.put_scalar("throughput/steps_per_sec", steps_per_sec)
        samples = self._samples_per_step or self._default_samples_per_step()
        if samples:
            self.trainer.monitors.put_scalar("throughput/samples_per_sec", steps_per_sec * samples)

    def _default_samples_per_step(self) -> Optional[int]:
        batch = getattr(self.trainer.input, "batch_size", None)
        if not batch:
            return None
        return int(batch) * max(int(self.trainer.num_replicas), 1)


class GPUUtilizationTracker(Callback):
    """Put each GPU's mean utilization (percent) during the epoch into the monitors, as
    ``GPUUtil/<device>`` (tensorpack's names).

    A background thread samples the utilization about once a second between
    ``before_epoch`` and ``after_epoch``, through NVML (``pynvml``, from the
    ``nvidia-ml-py`` package) or else ``nvidia-smi``. Devices are NVML indices: by default
    the ``CUDA_VISIBLE_DEVICES`` entries, or all GPUs TensorFlow sees. Where neither
    reader works (a machine without NVIDIA GPUs), it warns once by name and records
    nothing, so a program written for GPUs still runs.

    Example::

        callbacks = [ModelSaver(), GPUUtilizationTracker()]
    """

    _chief_only = False
    #: seconds between two samples
    interval = 1.0

    def __init__(self, devices: Optional[Sequence[int]] = None):
        self._devices = None if devices is None else [str(d) for d in devices]
        self._samples: List[List[float]] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._read = None

    def _before_train(self):
        if self._devices is None:
            env = os.environ.get("CUDA_VISIBLE_DEVICES")
            if env is not None:
                self._devices = [d.strip() for d in env.split(",") if d.strip()]
            else:
                from ..utils.devices import get_num_gpu
                self._devices = [str(i) for i in range(get_num_gpu())]
        try:
            if not self._devices:
                raise RuntimeError("no GPU is visible")
            self._read = self._utilization_reader()
            self._read()  # fail here, once, rather than in the thread
        except Exception as e:  # noqa: BLE001 - any reader failure means: nothing to track
            self._read = None
            logger.warning("GPUUtilizationTracker: cannot read GPU utilization (%s); it records nothing.", e)

    def _utilization_reader(self):
        """A function returning the current utilization (percent) of each device, in order."""
        try:
            import pynvml
        except ImportError:
            pynvml = None
        if pynvml is not None:
            pynvml.nvmlInit()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(int(d)) for d in self._devices]
            return lambda: [float(pynvml.nvmlDeviceGetUtilizationRates(h).gpu) for h in handles]
        cmd = ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
               "-i", ",".join(self._devices)]

        def read():
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True).stdout
            return [float(v) for v in out.split()]
        return read

    def _sample_loop(self):
        while not self._stop.wait(self.interval):
            try:
                self._samples.append(self._read())
            except Exception as e:  # noqa: BLE001 - a failed sample is skipped, not fatal
                logger.debug("GPUUtilizationTracker: a sample failed: %s", e)

    def _before_epoch(self):
        if self._read is None:
            return
        self._samples = []
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample_loop, name="GPUUtilizationTracker", daemon=True)
        self._thread.start()

    def _after_epoch(self):
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=self.interval + 10)
        self._thread = None
        if not self._samples:  # an epoch shorter than the interval: one sample now
            try:
                self._samples.append(self._read())
            except Exception:  # noqa: BLE001
                pass

    def _trigger_epoch(self):
        if not self._samples:
            return
        for dev, values in zip(self._devices, zip(*self._samples)):
            self.trainer.monitors.put_scalar(f"GPUUtil/{dev}", sum(values) / len(values))

    def _after_train(self):
        self._stop.set()
