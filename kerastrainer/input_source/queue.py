"""QueueInput: a background thread fills a TF queue from a DataFlow; steps dequeue in-graph."""
from __future__ import annotations

import threading
import time
import traceback
from typing import Optional

import tensorflow as tf

from ..callbacks.base import Callback
from ..dataflow.base import check_dataflow
from ..dataflow.common import BatchData
from ..utils import logger
from ..utils.concurrency import join_thread
from .base import InputSource, InputSourceError, check_datapoint, spec_to_str
from ..utils.casting import whole_number

__all__ = ["QueueInput", "BatchQueueInput", "DataFlowEndedError"]


class DataFlowEndedError(InputSourceError):
    """The DataFlow stopped producing datapoints while training still needed them."""


class _QueueSizeReport(Callback):
    """Puts the source's queue size in the monitors after each epoch."""

    _chief_only = False

    def __init__(self, source):
        self.source = source

    def _trigger_epoch(self):
        size = self.source.queue_size()
        if size is not None and self.trainer.monitors is not None:
            self.trainer.monitors.put_scalar(f"{self.source.name}/queue_size", size)


def _declared_length(ds) -> Optional[int]:
    try:
        return int(len(ds))
    except (NotImplementedError, TypeError, ValueError):
        return None


def _warn_wrong_length(where: str, declared: int, found: str) -> bool:
    logger.warning("%s: the DataFlow's len() is %d but a pass yields %s datapoints. steps_per_epoch comes from "
                   "len(), so an epoch is not one pass of the data (the input starts a new pass when one ends). "
                   "Fix its __len__, or give TrainConfig(steps_per_epoch=...).", where, declared, found)
    return True


class QueueInput(InputSource):
    """Feed a DataFlow into a ``tf.queue.FIFOQueue`` from a background thread.

    The traced step dequeues its batch in-graph, so training never waits on Python
    between steps while the queue holds data. Each replica dequeues its own batch
    (tensorpack's per-tower rule). The DataFlow is restarted when it ends; every
    datapoint is checked against ``inputs()`` (a mismatch stops training with a
    message naming the input). If the DataFlow raises, or ends without producing
    anything, the queue is closed and the trainer re-raises the error.

    Args:
        ds: the DataFlow of batches.
        queue: tensorpack's argument: a queue made by the program (``tf.queue.FIFOQueue(...)``, any
            ``tf.queue.QueueBase``, made eagerly) whose dtypes are those of ``inputs()``; by
            default a ``FIFOQueue`` of ``capacity`` batches.
        capacity: the default queue's size.
        name: the name of the queue and of its thread.

    Example::

        config = TrainConfig(model=MyModel(), data=QueueInput(df, capacity=50), ...)
        QueueInput(df, queue=tf.queue.FIFOQueue(100, [tf.float32, tf.int32]))   # tensorpack's form
    """

    def __init__(self, ds, queue: Optional[tf.queue.QueueBase] = None, capacity: int = 50,
                 name: str = "QueueInput"):
        self.ds = check_dataflow(ds, "QueueInput")
        if queue is not None and not isinstance(queue, tf.queue.QueueBase):
            raise TypeError(f"QueueInput(queue=...) takes a queue (tf.queue.FIFOQueue(...), a tf.queue.QueueBase); "
                            f"got {type(queue).__name__}. The default queue's size is capacity=.")
        self._given_queue = queue
        # a given queue's size is its own (TF does not tell it): None
        self.capacity = None if queue is not None else int(capacity)
        self.name = name
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self._error: Optional[BaseException] = None
        self._error_tb = ""
        self._first = None
        self._iter = None
        self._closed = False
        self.queue = None

    # --- set-up ----------------------------------------------------------------------------
    def _setup(self, specs):
        self.ds.reset_state()
        self._iter = iter(self.ds)
        try:
            first = next(self._iter)
        except StopIteration:
            raise DataFlowEndedError(
                f"{self.name}: the DataFlow {type(self.ds).__name__} produced no datapoint. "
                "Check that it is not empty.") from None
        self._first = check_datapoint(first, specs, f"{self.name} (first datapoint of "
                                                    f"{type(self.ds).__name__})")
        if self._first and self._first[0].ndim:
            self.batch_size = int(self._first[0].shape[0])
        if self._given_queue is None:
            self.queue = tf.queue.FIFOQueue(self.capacity, [s.dtype for s in specs],
                                            name=self.name.replace("/", "_"))
        else:
            self.queue = self._check_given_queue(self._given_queue, specs)

    def _check_given_queue(self, queue, specs):
        if not hasattr(queue.queue_ref, "numpy"):   # not an eager resource: a graph's queue
            raise InputSourceError(
                f"{self.name}: the queue given to QueueInput(queue=...) was made inside a graph; make it "
                "eagerly (at the top level of the program, before training), where the enqueue thread can "
                "reach it.")
        want = [s.dtype for s in specs]
        if list(queue.dtypes) != want:
            raise InputSourceError(
                f"{self.name}: the queue given to QueueInput(queue=...) holds dtypes "
                f"{[d.name for d in queue.dtypes]}, inputs() declares {[d.name for d in want]} "
                f"({[s.name for s in specs]}); make the queue with those dtypes.")
        shapes = queue.shapes
        if shapes is not None:
            for spec, shape in zip(specs, shapes):
                if shape.rank is not None and not spec.shape.is_compatible_with(shape):
                    raise InputSourceError(
                        f"{self.name}: the queue given to QueueInput(queue=...) has shape {shape} for input "
                        f"'{spec.name}', inputs() declares {spec_to_str(spec)}.")
        return queue

    def size(self) -> int:
        return len(self.ds)

    def get_callbacks(self):
        return [_QueueSizeReport(self)]

    # --- the producer thread --------------------------------------------------------------
    def start(self, strategy=None) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._produce, name=f"{self.name}-EnqueueThread", daemon=True)
        self._thread.start()

    def _datapoints(self):
        yield self._first
        self._first = None
        where = f"{self.name} ({type(self.ds).__name__})"
        count = 1  # the first pass gave the first datapoint already
        declared = _declared_length(self.ds)
        length_warned = False
        while not self._stop.is_set():
            for dp in self._iter:
                count += 1
                if declared is not None and count == declared + 1 and not length_warned:
                    length_warned = _warn_wrong_length(where, declared, f"more than {declared}")
                yield check_datapoint(dp, self.input_signature, f"{where}, datapoint {count} of its pass")
                if self._stop.is_set():
                    return
            if declared is not None and 0 < count < declared and not length_warned:
                length_warned = _warn_wrong_length(where, declared, str(count))
            if count == 0 and not self._stop.is_set():
                raise DataFlowEndedError(
                    f"{where}: the DataFlow ended and produced nothing when restarted, so training "
                    "cannot get more data. A DataFlow must be iterable again after it ends (a "
                    "generator that is exhausted is not); wrap a one-shot source with CacheData "
                    "or RepeatedData, or set steps_per_epoch*max_epoch within its length.")
            self._iter = iter(self.ds)
            count = 0

    def _produce(self):
        try:
            for arrs in self._datapoints():
                self.queue.enqueue(arrs)
        except (tf.errors.CancelledError, tf.errors.OutOfRangeError):
            pass  # queue closed by close(): a normal stop
        except BaseException as e:  # noqa: B902 - anything from the DataFlow is reported
            if not self._stop.is_set():
                self._error = e
                self._error_tb = traceback.format_exc()
                logger.error("%s: the producer thread failed: %s", self.name, e)
        finally:
            self._close_queue()

    def _close_queue(self):
        if self.queue is not None:
            try:
                self.queue.close(cancel_pending_enqueues=True)
            except Exception:  # already closed
                pass

    # --- in the graph ----------------------------------------------------------------------
    def _get_input_tensors(self):
        tensors = self.queue.dequeue(name="input_deque")
        if not isinstance(tensors, (list, tuple)):
            tensors = [tensors]
        return self.set_shapes(list(tensors))

    def queue_size(self):
        if self.queue is None or self._closed:
            return None
        try:
            return int(self.queue.size().numpy())
        except Exception:
            return None

    # --- stop and errors -------------------------------------------------------------------
    def raise_pending_error(self) -> None:
        if self._thread is not None:
            join_thread(self._thread, 5)
        if self._error is not None:
            err = self._error
            if isinstance(err, InputSourceError):
                raise err
            raise InputSourceError(
                f"{self.name}: the DataFlow {type(self.ds).__name__} raised while producing data:\n"
                f"{self._error_tb}") from err

    def cancel(self) -> None:
        # closing the queue fails a pending dequeue at once; close() joins threads later
        self._stop.set()
        self._close_queue()

    def fill_level(self):
        return self.queue_size()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._release_producer()
        self._close_queue()
        if self._thread is not None:
            deadline = time.time() + 10
            # the thread may be blocked inside the DataFlow's next(); closing the
            # DataFlow (e.g. stopping its workers) releases it
            self._close_dataflow()
            join_thread(self._thread, max(0.1, deadline - time.time()))
            if self._thread.is_alive():
                logger.warning("%s: the producer thread did not stop within 10 s; it is a daemon "
                               "thread and ends with the process.", self.name)
        else:
            self._close_dataflow()

    def _release_producer(self) -> None:
        """Let an enqueue blocked on a full queue finish, so the producer sees the stop flag
        and returns; cancelling that enqueue instead makes TensorFlow log a "Local rendezvous
        is aborting ... CANCELLED" warning at the end of every run."""
        if self._thread is None or self.queue is None:
            return
        for _ in range(3):
            if not self._thread.is_alive():
                return
            try:
                size = int(self.queue.size().numpy())
                if size == 0 or (self.capacity is not None and size < self.capacity):
                    return  # an enqueue now does not block
                self.queue.dequeue()  # training has ended: nobody else takes from the queue
            except Exception:
                return  # the queue is already closed
            join_thread(self._thread, 0.2)

    def _close_dataflow(self):
        close = getattr(self.ds, "close", None)
        if callable(close):
            try:
                close()
            except Exception as e:
                logger.warning("%s: closing the DataFlow failed: %s", self.name, e)


class BatchQueueInput(QueueInput):
    """Like :class:`QueueInput`, from a DataFlow of single datapoints (no batch axis), grouped into
    batches of ``batch_size`` before the queue (a pass has ``len(ds) // batch_size`` batches).

    Example::

        BatchQueueInput(Mnist('train'), batch_size=64)
    """

    def __init__(self, ds, batch_size: int, capacity: int = 50, name: str = "BatchQueueInput"):
        batch_size = whole_number(batch_size, f"{name}(batch_size=...)", minimum=1)
        super().__init__(BatchData(check_dataflow(ds, name), batch_size), capacity=capacity, name=name)
