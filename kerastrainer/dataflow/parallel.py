"""Run a DataFlow in several worker processes (or threads) and merge their outputs.

- :class:`MultiProcessRunnerZMQ` — the fast one: forked workers PUSH datapoints over
  an ``ipc://`` ZeroMQ socket in the wire format of :mod:`.wire` (numpy arrays as
  raw frames, no pickling, no copy on either side beyond the socket's own); on
  Linux, datapoints with >= 1 MiB of arrays skip the socket through shared-memory
  slots (one copy in the worker, none in the consumer).
- :class:`MultiProcessRunner` — the same with a ``multiprocessing.Queue`` (pickle).
- :class:`MultiThreadRunner` — threads, each with its own DataFlow from ``get_df()``.

Semantics (tensorpack's): every worker runs its own copy of ``ds`` forever, so one
"epoch" of the runner is ``len(ds)`` datapoints drawn from all workers, not one pass
over ``ds``. ``len(runner) == len(ds)``; each ``__iter__`` call yields ``len(ds)``
datapoints when the size is known, and never stops otherwise.

The consumer's local socket is for its own workers only: every worker message
starts with a random token made per run (16 bytes, known only to the consumer and
its forked workers); a message without it (a stray or hostile local process) is
dropped, counted in ``num_malformed`` and logged, never fatal. On Linux the socket
also refuses connections from other users (ZMQ_IPC_FILTER_UID), and it refuses
frames over ``max_message_bytes`` (default 1 GiB) before ZeroMQ allocates them; a
worker whose datapoint is over that limit fails with an error saying so.

Failure behaviour: a worker that raises makes the consumer raise
:class:`DataFlowWorkerError` with the worker's traceback; a worker that dies (e.g.
SIGKILL) makes it raise within about a second, naming the pid and the signal;
workers die with their parent (PR_SET_PDEATHSIG plus a parent watchdog); ``close()``
(also run at exit and when the runner is garbage collected) stops them.

This module holds the three runners. It leaves the worker-process plumbing (forking,
parent death, the message token, receiving with liveness checks, worker errors) to
:mod:`._workers`, the shared-memory slots to :mod:`._shm`, and the encoding of
datapoints to :mod:`.wire`. :class:`DataFlowWorkerError` is defined in
:mod:`._workers` and is importable from here, its documented path.

Example::

    ds = MultiProcessRunnerZMQ(MyBatchedDataFlow(), num_proc=2)
    ds.reset_state()
    for img, label in ds:
        ...
    ds.close()
"""
from __future__ import annotations

import itertools
import os
import pickle
import queue as queue_mod
import sys
import time
import traceback
import weakref
from typing import Any, Callable, Iterator, Optional

import zmq

from ..utils import logger
from ..utils.casting import whole_number
from ..utils.concurrency import StoppableThread, mp_fork_context, stop_processes
from ._shm import SHM_MARKER, SHM_MAX_SLOTS, ShmReader, ShmWriter, shm_supported, slot_channel
from ._workers import (LIVENESS_INTERVAL, DataFlowWorkerError, WorkerFailure, WorkerProcesses,
                       check_max_message_bytes, check_num_proc, new_ipc_address, recv_checked, release_threads,
                       release_zmq, report_failure_and_exit, secure_local_socket, size_or_minus_one, worker_prologue)
from .base import DataFlow, DataFlowReentrantGuard
from .wire import DEFAULT_MAX_MESSAGE_BYTES, check_message_size, dumps_frames, loads_frames, message_nbytes

__all__ = ["MultiProcessRunnerZMQ", "MultiProcessRunner", "MultiThreadRunner", "DataFlowWorkerError",
           "PrefetchData", "MultiProcessPrefetchData", "PrefetchDataZMQ", "MultiThreadPrefetchData"]


def _whole_or_none(value, what: str):
    """None, or ``value`` as a whole number (a limit in bytes is never truncated)."""
    return None if value is None else whole_number(value, what)


class _RunnerBase(DataFlow):
    """reset-once / closed bookkeeping shared by the runners."""

    def __init__(self):
        self._reset_done = False
        self._closed = False
        self._guard = DataFlowReentrantGuard(type(self).__name__)
        self._finalizer = None

    def _begin_reset(self) -> None:
        if self._reset_done:
            raise RuntimeError(
                f"reset_state() was already called on this {type(self).__name__}; call it once per "
                "process. Create a new runner to start new workers.")
        self._reset_done = True

    def _check_ready(self) -> None:
        if self._closed:
            raise RuntimeError(f"This {type(self).__name__} is closed; create a new one.")
        if not self._reset_done:
            raise RuntimeError(f"Call reset_state() on this {type(self).__name__} before iterating it.")

    def _iterate_queue(self) -> Iterator[Any]:
        """``len(ds)`` datapoints from ``self._get()`` (forever if unsized); close on errors."""
        self._check_ready()
        with self._guard:
            counter = range(self._size) if self._size >= 0 else itertools.count()
            for _ in counter:
                try:
                    item = self._get()
                except BaseException:
                    self.close()
                    raise
                yield item

    def close(self) -> None:
        """Stop the workers and release sockets and files; safe to call more than once."""
        self._closed = True
        if self._finalizer is not None:
            self._finalizer()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class _EmptyPasses:
    """A worker's guard against spinning forever on a DataFlow that yields nothing. A pass may be
    empty when the DataFlow says it has datapoints (``len(ds) > 0``): ``BatchDataByShape`` keeps an
    unfilled shape group for the next pass, as tensorpack's workers simply iterated again (HED).
    Such a DataFlow gets ``MAX`` empty passes in a row; one of unknown or zero size gets one."""

    MAX = 1000

    def __init__(self, ds, owner: str):
        try:
            self.limit = self.MAX if len(ds) > 0 else 1
        except (NotImplementedError, TypeError):
            self.limit = 1
        self.ds, self.owner, self.run = ds, owner, 0

    def check(self, n: int) -> None:
        self.run = 0 if n else self.run + 1
        if self.run >= self.limit:
            raise RuntimeError(f"The DataFlow {type(self.ds).__name__} given to {self.owner} yielded no datapoint "
                               f"in {self.run} whole pass(es) in a row; the worker would spin forever.")


# ----------------------------------------------------------------------------
# MultiProcessRunnerZMQ
# ----------------------------------------------------------------------------

def _zmq_runner_worker(parent_pid, use_pdeathsig, ds, addr, hwm, idx, owner, chan, token, max_bytes):
    worker_prologue(parent_pid, use_pdeathsig)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.sndhwm = hwm
    sock.connect(addr)
    encode = ShmWriter(chan, idx, min(hwm, SHM_MAX_SLOTS)).frames if chan is not None else dumps_frames
    try:
        ds.reset_state()
        empty = _EmptyPasses(ds, owner)
        while True:
            n = 0
            for dp in ds:
                frames = encode(dp)
                if max_bytes is not None:
                    check_message_size(message_nbytes(frames), max_bytes, f"{owner} worker {idx}")
                sock.send_multipart([token] + frames, copy=False)
                n += 1
            empty.check(n)
    except Exception:
        report_failure_and_exit(sock, ctx, owner, idx, token)


class MultiProcessRunnerZMQ(_RunnerBase):
    """Run ``ds`` in ``num_proc`` forked processes; they send datapoints over ZeroMQ.

    Args:
        ds: the DataFlow; each worker calls ``ds.reset_state()`` and iterates it forever.
        num_proc: number of worker processes.
        hwm: ZeroMQ high-water mark (datapoints buffered per socket end); also caps the
            shared-memory slots per worker (at most 16).

        shared_memory: move datapoints with >= 1 MiB of arrays through shared memory
            (Linux memfd slots, one copy in the worker, none in the consumer) instead of
            the socket; None (default) uses it where the platform has it.
        max_message_bytes: the largest datapoint (encoded) that may go through the
            socket (default 1 GiB); a worker with a larger one fails, saying so. None:
            no limit.

    Messages on the local socket that do not come from this runner's workers are
    dropped and counted in ``num_malformed`` (see the module docstring).

    Arrays that go through the socket are sent without copying them: a DataFlow must
    not modify an array in place after yielding it (make a new array per datapoint,
    as kerastrainer's own DataFlows do).

    Example::

        ds = MultiProcessRunnerZMQ(BatchData(MyDataFlow(), 64), num_proc=2)
        ds.reset_state()
        for dp in ds:   # len(ds) datapoints per pass, from both workers
            ...
    """

    def __init__(self, ds, num_proc: int = 1, hwm: int = 50, shared_memory: Optional[bool] = None,
                 max_message_bytes: Optional[int] = DEFAULT_MAX_MESSAGE_BYTES):
        super().__init__()
        self.max_message_bytes = check_max_message_bytes(
            _whole_or_none(max_message_bytes, "MultiProcessRunnerZMQ(max_message_bytes=...)"), type(self).__name__)
        if shared_memory and not shm_supported():
            raise ValueError("MultiProcessRunnerZMQ: shared_memory=True needs Linux (os.memfd_create); "
                             "leave it as None to use it where available.")
        self.shared_memory = shm_supported() if shared_memory is None else bool(shared_memory)
        # counts are whole numbers: int(2.7) would run 2 processes without saying so
        self.num_proc = check_num_proc(whole_number(num_proc, "MultiProcessRunnerZMQ(num_proc=...)", minimum=1),
                                       "MultiProcessRunnerZMQ")
        self.hwm = whole_number(hwm, "MultiProcessRunnerZMQ(hwm=...)", minimum=1)
        self.ds = ds
        self._size = size_or_minus_one(ds)
        self._sock = None
        self._poller = None
        self._workers = None
        if self.num_proc > 1:
            logger.info("MultiProcessRunnerZMQ runs %d copies of the DataFlow: one pass of the runner "
                        "is len(ds) datapoints drawn from all copies, not one pass over ds.", self.num_proc)

    def __len__(self) -> int:
        return self.ds.__len__()

    @property
    def num_malformed(self) -> int:
        """Messages dropped on the local socket because they did not come from the workers."""
        return self._workers.num_malformed if self._workers is not None else 0

    def reset_state(self) -> None:
        self._begin_reset()
        name = type(self).__name__
        self._workers = WorkerProcesses(name, self.max_message_bytes)
        addr, tmpdir = new_ipc_address("kt-runner-")
        ctx = zmq.Context()
        sock = ctx.socket(zmq.PULL)
        sock.rcvhwm = self.hwm
        secure_local_socket(sock, self.max_message_bytes)
        self._closers: list = []
        self._finalizer = weakref.finalize(self, release_zmq, self._workers.procs, [sock], ctx, tmpdir,
                                           os.getpid(), self._closers)
        sock.bind(addr)
        self._sock = sock
        self.address = addr
        # one socketpair per worker for shared-memory slots; the worker's end is closed here after fork
        pairs = [slot_channel() if self.shared_memory else (None, None) for _ in range(self.num_proc)]
        self._chans = [a for a, _ in pairs]
        self._shm = ShmReader(self._chans) if self.shared_memory else None
        self._closers.extend(c for pair in pairs for c in pair if c is not None)
        try:
            token, max_bytes = self._workers.token, self.max_message_bytes
            self._workers.start(_zmq_runner_worker,
                                lambda i: (self.ds, addr, self.hwm, i, name, pairs[i][1], token, max_bytes),
                                self.num_proc)
        finally:
            for _, b in pairs:
                if b is not None:
                    b.close()
        self._poller = zmq.Poller()
        self._poller.register(sock, zmq.POLLIN)
        for s in self._workers.sentinels:
            self._poller.register(s, zmq.POLLIN)

    def _recv(self):
        try:
            frames = recv_checked(self._sock, self._workers, self._poller)
            if self._shm is not None and frames[0].buffer[:4] == SHM_MARKER:
                return self._shm.decode(frames)
            return loads_frames(frames)
        except BaseException:
            self.close()  # the workers are of no use now; do not leave them running
            raise

    def __iter__(self) -> Iterator[Any]:
        self._check_ready()
        with self._guard:
            counter = range(self._size) if self._size >= 0 else itertools.count()
            for _ in counter:
                yield self._recv()


# ----------------------------------------------------------------------------
# MultiProcessRunner (multiprocessing.Queue)
# ----------------------------------------------------------------------------

def _queue_runner_worker(parent_pid, use_pdeathsig, ds, q, idx, owner):
    worker_prologue(parent_pid, use_pdeathsig)
    try:
        ds.reset_state()
        empty = _EmptyPasses(ds, owner)
        while True:
            n = 0
            for dp in ds:
                # pickle here, not in the queue's feeder thread, so that a failure is reported
                q.put(pickle.dumps(dp, protocol=pickle.HIGHEST_PROTOCOL))
                n += 1
            empty.check(n)
    except Exception:
        q.put(WorkerFailure(owner, idx, os.getpid(), traceback.format_exc()))
        sys.exit(1)


def _release_queue(procs, q, owner_pid) -> None:
    if os.getpid() != owner_pid:
        return
    stop_processes(procs)
    q.cancel_join_thread()
    q.close()


class MultiProcessRunner(_RunnerBase):
    """Run ``ds`` in ``num_proc`` forked processes that send datapoints through a
    ``multiprocessing.Queue`` (pickled). Prefer :class:`MultiProcessRunnerZMQ` for
    large arrays; this one needs no ZeroMQ.

    Example::

        ds = MultiProcessRunner(MyDataFlow(), num_prefetch=100, num_proc=2)
        ds.reset_state()
        for dp in ds:
            ...
    """

    __iter__ = _RunnerBase._iterate_queue

    def __init__(self, ds, num_prefetch: int, num_proc: int):
        super().__init__()
        self.num_proc = check_num_proc(whole_number(num_proc, "MultiProcessRunner(num_proc=...)", minimum=1),
                                       "MultiProcessRunner")
        self.num_prefetch = whole_number(num_prefetch, "MultiProcessRunner(num_prefetch=...)", minimum=1)
        self.ds = ds
        self._size = size_or_minus_one(ds)
        self._queue = None
        self._workers = None

    def __len__(self) -> int:
        return self.ds.__len__()

    def reset_state(self) -> None:
        self._begin_reset()
        name = type(self).__name__
        self._queue = mp_fork_context().Queue(self.num_prefetch)
        self._workers = WorkerProcesses(name)
        self._finalizer = weakref.finalize(self, _release_queue, self._workers.procs, self._queue, os.getpid())
        self._workers.start(_queue_runner_worker, lambda i: (self.ds, self._queue, i, name), self.num_proc)

    def _get(self):
        while True:
            dead = self._workers.check()
            if not dead:
                try:
                    item = self._queue.get(timeout=LIVENESS_INTERVAL)
                except queue_mod.Empty:
                    continue
                if type(item) is WorkerFailure:
                    raise item.error()
                return pickle.loads(item)
            # drain: the dead worker may have queued its traceback
            end = time.monotonic() + 1.0
            while time.monotonic() < end:
                try:
                    item = self._queue.get(timeout=0.1)
                except queue_mod.Empty:
                    break
                if type(item) is WorkerFailure:
                    raise item.error()
            raise self._workers.death_error(dead)


# ----------------------------------------------------------------------------
# MultiThreadRunner
# ----------------------------------------------------------------------------

class _RunnerThread(StoppableThread):
    def __init__(self, df, q: queue_mod.Queue, idx: int, owner: str):
        super().__init__(name=f"{owner}-{idx}")
        self.df, self.q, self.idx, self.owner = df, q, idx, owner

    def _put(self, item) -> bool:
        while not self.stopped():
            try:
                self.q.put(item, timeout=0.2)
                return True
            except queue_mod.Full:
                pass
        return False

    def run(self):
        try:
            self.df.reset_state()
            while not self.stopped():
                n = 0
                for dp in self.df:
                    if not self._put(dp):
                        return
                    n += 1
                if n == 0:
                    raise RuntimeError(f"The DataFlow {type(self.df).__name__} given to {self.owner} yielded "
                                       "no datapoint in a whole pass; the thread would spin forever.")
        except Exception:
            self._put(WorkerFailure(self.owner, self.idx, None, traceback.format_exc()))


class MultiThreadRunner(_RunnerBase):
    """Run ``num_thread`` DataFlows made by ``get_df()`` in threads, merging their outputs.

    Each thread calls ``get_df()`` once (in ``__init__``) and runs its own DataFlow
    forever. Useful when the DataFlow releases the GIL (I/O, OpenCV, numpy).

    Example::

        ds = MultiThreadRunner(lambda: MyDataFlow(), num_prefetch=100, num_thread=4)
        ds.reset_state()
        for dp in ds:
            ...
    """

    __iter__ = _RunnerBase._iterate_queue

    def __init__(self, get_df: Callable[[], Any], num_prefetch: int, num_thread: int):
        super().__init__()
        if not callable(get_df):
            raise TypeError(f"MultiThreadRunner: get_df must be a function returning a DataFlow, "
                            f"got {type(get_df).__name__}")
        self.num_thread = whole_number(num_thread, "MultiThreadRunner(num_thread=...)", minimum=1)
        num_prefetch = whole_number(num_prefetch, "MultiThreadRunner(num_prefetch=...)", minimum=1)
        self._queue: queue_mod.Queue = queue_mod.Queue(num_prefetch)
        name = type(self).__name__
        self._threads = [_RunnerThread(get_df(), self._queue, i, name) for i in range(self.num_thread)]
        self._size = size_or_minus_one(self._threads[0].df)

    def __len__(self) -> int:
        return self._threads[0].df.__len__()

    def reset_state(self) -> None:
        self._begin_reset()
        self._finalizer = weakref.finalize(self, release_threads, self._threads, self._queue)
        for t in self._threads:
            t.start()

    def _get(self):
        while True:
            try:
                item = self._queue.get(timeout=0.5)
            except queue_mod.Empty:
                if self._closed:
                    raise RuntimeError("MultiThreadRunner was closed while being iterated") from None
                continue
            if type(item) is WorkerFailure:
                raise item.error()
            return item


# tensorpack's older names of the runners (its own aliases, same arguments)
PrefetchData = MultiProcessRunner
MultiProcessPrefetchData = MultiProcessRunner
PrefetchDataZMQ = MultiProcessRunnerZMQ
MultiThreadPrefetchData = MultiThreadRunner
