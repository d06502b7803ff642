"""StagingInput: each step takes a batch already copied to its device."""
from __future__ import annotations

import itertools
import threading
import traceback
from typing import Dict, List, Optional

import tensorflow as tf

from ..utils import logger
from ..utils.concurrency import join_thread
from ..utils.devices import current_device, current_replica_index, device_type
from .base import InputSource, InputSourceError

__all__ = ["StagingInput"]

_ids = itertools.count()
_MODES = ("thread", "step")


def _local_device(device: str) -> str:
    """``'/device:GPU:1'`` for any name of that device of this process (a replica's full
    name, a tf.function's, an eager op's, or ``'/gpu:1'``)."""
    return f"/device:{device_type(device)}:{tf.DeviceSpec.from_string(device).device_index or 0}"


class StagingInput(InputSource):
    """Wrap an InputSource so that each step uses a batch already copied to its device.

    Two ways to do the copy (``mode``):

    - ``'thread'`` (the default): a background thread takes each tower's batches from the
      wrapped input, copies them to the tower's device and stages them there (TF's
      ``Stage`` op), up to ``nr_stage`` ahead; a step only takes a staged batch
      (``Unstage``), so the host-to-device copy never sits in the train function's loop.
      TensorFlow's copy to a GPU first waits for the work already queued on the GPU, so a
      copy made inside the loop runs between steps instead of beside them.
    - ``'step'``: tensorpack's way, each step stages the next batch after taking its own,
      inside the train function.

    On CPU devices there is no copy to hide and the wrapped input is used as it is, unless
    ``force=True``. Each tower takes its own batches in turn (tower 0 the first of a round,
    tower 1 the second, ...), as with the wrapped input alone.

    Args:
        input: the InputSource to prefetch from (e.g. a QueueInput).
        nr_stage: batches staged ahead per tower (2 or more lets a copy wait for the GPU's
            queued work without delaying a step).
        device: stage on this device instead of each tower's own (tensorpack's argument, for
            a predictor). A GPU named here that the machine lacks turns staging off.
        force: stage even on CPU devices (for testing the mechanism).
        mode: ``'thread'`` or ``'step'`` (see above).

    Example::

        data = StagingInput(QueueInput(df), nr_stage=2)
    """

    def __init__(self, input: InputSource, nr_stage: int = 2, device: Optional[str] = None,  # noqa: A002
                 force: bool = False, mode: str = "thread"):
        if not isinstance(input, InputSource):
            raise TypeError(f"StagingInput wraps an InputSource; got {type(input).__name__}")
        if isinstance(input, StagingInput):
            raise ValueError("StagingInput cannot wrap another StagingInput.")
        if input.requires_feed:
            raise ValueError("StagingInput cannot wrap FeedInput (it has no in-graph tensors).")
        if mode not in _MODES:
            raise ValueError(f"StagingInput(mode=...) must be one of {_MODES}; got {mode!r}")
        if int(nr_stage) < 1:
            raise ValueError(f"StagingInput(nr_stage=...) must be at least 1; got {nr_stage!r}")
        self.input = input
        self.nr_stage = int(nr_stage)
        self.device = device
        self.force = force
        self.mode = mode
        self._name = f"kerastrainer_staging_{next(_ids)}"
        # mode 'thread': the staging device of each replica, in replica order; per staging
        # device, a queue of tokens (one per staged batch), so that a step waits on a queue
        # that can be closed (Unstage itself cannot be woken)
        self._replica_devices: List[str] = []
        self._tokens: Dict[str, tf.queue.FIFOQueue] = {}
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self._error: Optional[BaseException] = None
        self._error_tb = ""
        self._closed = False
        self._started = False

    @property
    def batch_size(self):
        return self.input.batch_size

    def _setup(self, specs):
        self.input.setup(specs)

    def size(self) -> int:
        return self.input.size()

    def get_callbacks(self):
        return self.input.get_callbacks()

    # --- devices ---------------------------------------------------------------------------
    def _staging_device(self) -> str:
        """Where the current replica's batches are staged (called in a replica's context)."""
        return _local_device(self.device or current_device())

    def _active_on(self, device: str) -> bool:
        if self.force:
            return True
        if device_type(device) != "GPU":
            return False
        if self.device:
            index = tf.DeviceSpec.from_string(device).device_index or 0
            return index < len(tf.config.list_logical_devices("GPU"))
        return True

    def _stage_name(self, device: str) -> str:
        return f"{self._name}_{device.replace('/', '_').replace(':', '_')}"

    def _replica_staging_devices(self, strategy) -> List[str]:
        """The staging device of each replica of ``strategy``, in replica order."""
        found = {}

        def probe():
            found[current_replica_index()] = self._staging_device()
            return tf.constant(0)

        strategy.run(tf.function(probe))
        return [found[i] for i in sorted(found)]

    # --- starting and stopping -------------------------------------------------------------
    def start(self, strategy=None) -> None:
        """Start the wrapped input, then stage the first batches on every tower of ``strategy``
        (the fit loop calls it when training starts; again, it does nothing)."""
        self.input.start(strategy)
        if self._started:
            return
        self._started = True
        strategy = strategy or tf.distribute.get_strategy()
        devices = self._replica_staging_devices(strategy)
        active = [d for d in devices if self._active_on(d)]
        if not active:
            why = (f"{self.device} is not on this machine" if self.device and device_type(self.device) == "GPU"
                   else "the towers run on " + ", ".join(sorted(set(devices))))
            logger.info("StagingInput: %s, so batches come straight from %s (staging is for GPUs; "
                        "force=True stages anyway).", why, type(self.input).__name__)
            return
        if self.mode == "step":
            def prime_replica():
                device = self._staging_device()
                if self._active_on(device):
                    for _ in range(self.nr_stage):
                        self._stage_in_graph(device)
                return tf.constant(0)
            strategy.run(tf.function(prime_replica))
            return
        self._replica_devices = active
        for d in active:
            if d not in self._tokens:
                self._tokens[d] = tf.queue.FIFOQueue(self.nr_stage * active.count(d), [tf.int32], shapes=[[]],
                                                     name="staging_tokens")
        self._thread = threading.Thread(target=self._stage_forever, name=f"{self._name}-thread", daemon=True)
        self._thread.start()
        logger.info("StagingInput: a thread copies each batch to %s ahead of its step (%d staged per tower).",
                    ", ".join(sorted(set(active))), self.nr_stage)

    def _stage_forever(self) -> None:
        try:
            while not self._stop.is_set():
                for device in self._replica_devices:
                    self._stage_batch(device, self.input.get_input_tensors())
                    self._tokens[device].enqueue(tf.constant(0))
        except (tf.errors.OutOfRangeError, tf.errors.CancelledError):
            pass   # the wrapped input or the token queue was closed: the wrapped input says why
        except BaseException as e:  # noqa: B902 - a failed copy is reported to the trainer
            if not self._stop.is_set():
                self._error = e
                self._error_tb = traceback.format_exc()
                logger.error("StagingInput: staging a batch failed: %s", e)
        finally:
            self._close_tokens(cancel=False)

    def _stage_batch(self, device: str, tensors: list) -> None:
        """Copy one batch to ``device`` and stage it there (the staging thread, eagerly)."""
        with tf.device(device):
            tf.raw_ops.Stage(values=tensors, capacity=0, shared_name=self._stage_name(device))

    def _close_tokens(self, cancel: bool) -> None:
        for q in self._tokens.values():
            try:
                q.close(cancel_pending_enqueues=cancel)
            except Exception:  # already closed
                pass

    def stop(self) -> None:
        """End the staging thread (after training); safe to call more than once."""
        self._stop.set()
        self._close_tokens(cancel=True)
        if self._thread is None:
            return
        # the thread may wait on the wrapped input: closing that releases it
        self.input.close()
        join_thread(self._thread, 10)
        if self._thread.is_alive():
            logger.warning("StagingInput: the staging thread did not stop within 10 s; it is a daemon "
                           "thread and ends with the process.")
        for device in set(self._replica_devices):
            with tf.device(device):
                tf.raw_ops.StageClear(shared_name=self._stage_name(device), capacity=0,
                                      dtypes=[s.dtype for s in self.input_signature])

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.stop()
        self.input.close()

    def raise_pending_error(self) -> None:
        if self._thread is not None:
            join_thread(self._thread, 5)
        self.input.raise_pending_error()
        if self._error is not None:
            raise InputSourceError(
                f"StagingInput: staging a batch on {', '.join(sorted(set(self._replica_devices)))} failed "
                f"(taking it from {type(self.input).__name__}, or copying it there):\n{self._error_tb}"
            ) from self._error

    def cancel(self) -> None:
        self._close_tokens(cancel=True)
        self.input.cancel()

    def fill_level(self):
        level = self.input.fill_level()
        if not self._tokens:
            return level
        try:
            staged = min(int(q.size().numpy()) for q in self._tokens.values())
        except Exception:
            return level
        return staged + (level or 0)

    # --- in the graph ----------------------------------------------------------------------
    def _stage_in_graph(self, device: str):
        tensors = self.input.get_input_tensors()
        with tf.device(device):
            tf.raw_ops.Stage(values=tensors, shared_name=self._stage_name(device), capacity=self.nr_stage + 1)

    def _get_input_tensors(self):
        device = self._staging_device()
        if not self._active_on(device):
            return self.input.get_input_tensors()
        dtypes = [s.dtype for s in self.input_signature]
        if self.mode == "step":
            with tf.device(device):
                tensors = tf.raw_ops.Unstage(dtypes=dtypes, shared_name=self._stage_name(device),
                                             capacity=self.nr_stage + 1)
            tensors = self.set_shapes(list(tensors))
            # stage the next batch after this one was taken
            with tf.control_dependencies([tensors[0]]):
                self._stage_in_graph(device)
            return tensors
        if device not in self._tokens:
            raise InputSourceError(f"StagingInput: no batches are staged on {device} (staged on "
                                   f"{sorted(self._tokens)}). Its start() runs before training.")
        token = self._tokens[device].dequeue()
        with tf.control_dependencies([token]), tf.device(device):
            tensors = tf.raw_ops.Unstage(dtypes=dtypes, shared_name=self._stage_name(device), capacity=0)
        return self.set_shapes(list(tensors))

