"""Run a DataFlow in several worker processes (or threads) and merge their outputs.

- :class:`MultiProcessRunnerZMQ` — the fast one: forked workers PUSH datapoints over
  an ``ipc://`` ZeroMQ socket in the wire format of :mod:`.wire` (numpy arrays as
  raw frames, no pickling, no copy on either side beyond the socket's own).
- :class:`MultiProcessRunner` — the same with a ``multiprocessing.Queue`` (pickle).
- :class:`MultiThreadRunner` — threads, each with its own DataFlow from ``get_df()``.

Semantics (tensorpack's): every worker runs its own copy of ``ds`` forever, so one
"epoch" of the runner is ``len(ds)`` datapoints drawn from all workers, not one pass
over ``ds``. ``len(runner) == len(ds)``; each ``__iter__`` call yields ``len(ds)``
datapoints when the size is known, and never stops otherwise.

Failure behaviour: a worker that raises makes the consumer raise
:class:`DataFlowWorkerError` with the worker's traceback; a worker that dies (e.g.
SIGKILL) makes it raise within about a second, naming the pid and the signal;
workers die with their parent (PR_SET_PDEATHSIG plus a parent watchdog); ``close()``
(also run at exit and when the runner is garbage collected) stops them.

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
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import weakref
from typing import Any, Callable, Iterator, List, Optional

import msgpack
import zmq

from ..utils import logger
from ..utils.concurrency import (StoppableThread, describe_exitcode, die_with_parent, mp_fork_context,
                                 stop_processes)
from .base import DataFlow, DataFlowReentrantGuard
from .wire import dumps_frames, loads_frames

__all__ = ["MultiProcessRunnerZMQ", "MultiProcessRunner", "MultiThreadRunner", "DataFlowWorkerError"]

ERROR_MARKER = b"KTERR"      # first frame of a worker's error message
_LIVENESS_INTERVAL = 0.5     # seconds between worker liveness checks while data flows
_POLL_MS = 1000


class DataFlowWorkerError(RuntimeError):
    """A DataFlow worker (process or thread) raised an exception or died."""


# ----------------------------------------------------------------------------
# helpers shared with parallel_map.py and remote.py
# ----------------------------------------------------------------------------

def _size_or_minus_one(ds) -> int:
    try:
        return len(ds)
    except (NotImplementedError, TypeError):
        return -1


def _format_failure(owner: str, idx: int, pid: Optional[int], tb: str) -> str:
    who = f"worker {idx}" + (f" (pid {pid})" if pid is not None else "")
    return f"{who} of {owner} raised an exception:\n{tb.rstrip()}"


def error_frames(owner: str, idx: int) -> List[bytes]:
    """Frames describing the exception being handled, for a worker to send to its consumer."""
    info = {"owner": owner, "worker": idx, "pid": os.getpid(), "traceback": traceback.format_exc()}
    return [ERROR_MARKER, msgpack.packb(info, use_bin_type=True)]


def raise_if_error_frames(frames) -> None:
    """Raise :class:`DataFlowWorkerError` if ``frames`` is a worker's error message.

    The message is ``[ERROR_MARKER, info]``, after a ROUTER socket's identity frame if any.
    """
    if 2 <= len(frames) <= 3 and bytes(getattr(frames[-2], "buffer", frames[-2])) == ERROR_MARKER:
        try:
            info = msgpack.unpackb(bytes(getattr(frames[-1], "buffer", frames[-1])), raw=False)
            msg = _format_failure(info["owner"], info["worker"], info["pid"], info["traceback"])
        except Exception:  # a broken error message is still an error
            msg = "a worker sent an unreadable error message"
        raise DataFlowWorkerError(msg)


def new_ipc_address(prefix: str) -> tuple:
    """(``ipc://`` address, temp dir holding the socket file); the path fits the 107-byte limit."""
    base = tempfile.gettempdir()
    if len(base) > 60:  # a long TMPDIR would overflow sockaddr_un
        base = "/tmp"
    d = tempfile.mkdtemp(prefix=prefix, dir=base)
    return "ipc://" + os.path.join(d, "sock"), d


def _on_main_thread() -> bool:
    # PR_SET_PDEATHSIG fires when the forking *thread* ends: only trust it from the main thread
    return threading.current_thread() is threading.main_thread()


def _worker_prologue(parent_pid: int, use_pdeathsig: bool) -> None:
    """First thing in a forked worker: die with the parent; leave Ctrl-C to the parent."""
    die_with_parent(parent_pid, use_pdeathsig)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class WorkerProcesses:
    """The forked worker processes of one runner, and how to tell whether they are alive."""

    def __init__(self, owner: str):
        self.owner = owner
        self.procs: list = []
        self._last_check = 0.0

    def start(self, target: Callable, args_of: Callable[[int], tuple], num: int) -> None:
        ctx = mp_fork_context()
        use_pdeathsig = _on_main_thread()
        parent = os.getpid()
        for i in range(num):
            p = ctx.Process(target=target, args=(parent, use_pdeathsig) + args_of(i),
                            name=f"{self.owner}-{i}", daemon=True)
            p.start()
            self.procs.append(p)

    @property
    def sentinels(self) -> List[int]:
        return [p.sentinel for p in self.procs]

    def dead(self) -> list:
        """[(index, process)] of the workers that have exited."""
        return [(i, p) for i, p in enumerate(self.procs) if p.exitcode is not None]

    def death_error(self, dead: list) -> DataFlowWorkerError:
        parts = [f"worker {i} (pid {p.pid}) {describe_exitcode(p.exitcode)}" for i, p in dead]
        return DataFlowWorkerError(
            f"{self.owner}: " + "; ".join(parts) + ". The datapoints it was producing are lost; "
            "look for an out-of-memory kill (dmesg) or a crash in native code of the DataFlow.")

    def check(self, force: bool = False) -> list:
        """Rate-limited liveness check: the dead workers, or [] (also when not checked now)."""
        now = time.monotonic()
        if not force and now - self._last_check < _LIVENESS_INTERVAL:
            return []
        self._last_check = now
        return self.dead()


def recv_checked(sock: zmq.Socket, workers: WorkerProcesses, poller: zmq.Poller,
                 timeout: Optional[float] = None) -> list:
    """Receive one multipart message, raising as soon as a worker dies or reports an error.

    ``poller`` must watch ``sock`` and the workers' sentinels.
    """
    dead = workers.check()
    if not dead:
        try:
            frames = sock.recv_multipart(flags=zmq.NOBLOCK, copy=False)
            raise_if_error_frames(frames)
            return frames
        except zmq.Again:
            pass
    deadline = None if timeout is None else time.monotonic() + timeout
    while not dead:
        events = dict(poller.poll(_POLL_MS))
        if sock in events:
            frames = sock.recv_multipart(flags=zmq.NOBLOCK, copy=False)
            raise_if_error_frames(frames)
            return frames
        dead = workers.check(force=True)
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"{workers.owner}: no datapoint arrived within {timeout} s")
    fail_for_dead(sock, workers, dead)


def fail_for_dead(sock: zmq.Socket, workers: WorkerProcesses, dead: list) -> None:
    """Raise the error of the dead workers: the traceback one of them sent, or how it died."""
    # A worker that raised sent its traceback just before exiting: look for it.
    end = time.monotonic() + 1.0
    while time.monotonic() < end and sock.poll(300, zmq.POLLIN):
        raise_if_error_frames(sock.recv_multipart(copy=False))  # data is dropped: we fail anyway
    raise workers.death_error(dead)


def _release_zmq(workers_procs, sockets, ctx, tmpdir, owner_pid) -> None:
    # Runs from close(), garbage collection or interpreter exit: never references the runner.
    if os.getpid() != owner_pid:  # a forked child holds a copy of this finalizer
        return
    stop_processes(workers_procs)
    for s in sockets:
        try:
            s.close(linger=0)
        except zmq.ZMQError:
            pass
    if ctx is not None:
        ctx.term()
    if tmpdir:
        shutil.rmtree(tmpdir, ignore_errors=True)


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


# ----------------------------------------------------------------------------
# MultiProcessRunnerZMQ
# ----------------------------------------------------------------------------

def _zmq_runner_worker(parent_pid, use_pdeathsig, ds, addr, hwm, idx, owner):
    _worker_prologue(parent_pid, use_pdeathsig)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.sndhwm = hwm
    sock.connect(addr)
    try:
        ds.reset_state()
        while True:
            n = 0
            for dp in ds:
                sock.send_multipart(dumps_frames(dp), copy=False)
                n += 1
            if n == 0:
                raise RuntimeError(f"The DataFlow {type(ds).__name__} given to {owner} yielded no datapoint "
                                   "in a whole pass; the worker would spin forever.")
    except Exception:
        sock.sndtimeo = 5000
        try:
            sock.send_multipart(error_frames(owner, idx))
        except zmq.ZMQError:
            pass
        sock.close(linger=5000)
        ctx.term()
        sys.exit(1)


class MultiProcessRunnerZMQ(_RunnerBase):
    """Run ``ds`` in ``num_proc`` forked processes; they send datapoints over ZeroMQ.

    Args:
        ds: the DataFlow; each worker calls ``ds.reset_state()`` and iterates it forever.
        num_proc: number of worker processes.
        hwm: ZeroMQ high-water mark (datapoints buffered per socket end).

    Workers send arrays without copying them: a DataFlow must not modify an array in
    place after yielding it (make a new array per datapoint, as kerastrainer's own
    DataFlows do).

    Example::

        ds = MultiProcessRunnerZMQ(BatchData(MyDataFlow(), 64), num_proc=2)
        ds.reset_state()
        for dp in ds:   # len(ds) datapoints per pass, from both workers
            ...
    """

    def __init__(self, ds, num_proc: int = 1, hwm: int = 50):
        super().__init__()
        if int(num_proc) < 1:
            raise ValueError(f"MultiProcessRunnerZMQ: num_proc must be >= 1, got {num_proc}")
        if int(hwm) < 1:
            raise ValueError(f"MultiProcessRunnerZMQ: hwm must be >= 1, got {hwm}")
        self.ds = ds
        self.num_proc = int(num_proc)
        self.hwm = int(hwm)
        self._size = _size_or_minus_one(ds)
        self._sock = None
        self._poller = None
        self._workers = None
        if self.num_proc > 1:
            logger.info("MultiProcessRunnerZMQ runs %d copies of the DataFlow: one pass of the runner "
                        "is len(ds) datapoints drawn from all copies, not one pass over ds.", self.num_proc)

    def __len__(self) -> int:
        return self.ds.__len__()

    def reset_state(self) -> None:
        self._begin_reset()
        name = type(self).__name__
        self._workers = WorkerProcesses(name)
        addr, tmpdir = new_ipc_address("kt-runner-")
        ctx = zmq.Context()
        sock = ctx.socket(zmq.PULL)
        sock.rcvhwm = self.hwm
        self._finalizer = weakref.finalize(self, _release_zmq, self._workers.procs, [sock], ctx, tmpdir,
                                           os.getpid())
        sock.bind(addr)
        self._sock = sock
        self.address = addr
        self._workers.start(_zmq_runner_worker, lambda i: (self.ds, addr, self.hwm, i, name), self.num_proc)
        self._poller = zmq.Poller()
        self._poller.register(sock, zmq.POLLIN)
        for s in self._workers.sentinels:
            self._poller.register(s, zmq.POLLIN)

    def _recv(self):
        try:
            return loads_frames(recv_checked(self._sock, self._workers, self._poller))
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

class _WorkerFailure:
    """What a queue worker puts in the queue when it raises."""

    def __init__(self, owner: str, idx: int, pid: int, tb: str):
        self.owner, self.idx, self.pid, self.tb = owner, idx, pid, tb

    def error(self) -> DataFlowWorkerError:
        return DataFlowWorkerError(_format_failure(self.owner, self.idx, self.pid, self.tb))


def _queue_runner_worker(parent_pid, use_pdeathsig, ds, q, idx, owner):
    _worker_prologue(parent_pid, use_pdeathsig)
    try:
        ds.reset_state()
        while True:
            n = 0
            for dp in ds:
                # pickle here, not in the queue's feeder thread, so that a failure is reported
                q.put(pickle.dumps(dp, protocol=pickle.HIGHEST_PROTOCOL))
                n += 1
            if n == 0:
                raise RuntimeError(f"The DataFlow {type(ds).__name__} given to {owner} yielded no datapoint "
                                   "in a whole pass; the worker would spin forever.")
    except Exception:
        q.put(_WorkerFailure(owner, idx, os.getpid(), traceback.format_exc()))
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

    def __init__(self, ds, num_prefetch: int, num_proc: int):
        super().__init__()
        if int(num_proc) < 1 or int(num_prefetch) < 1:
            raise ValueError(f"MultiProcessRunner: num_proc and num_prefetch must be >= 1, "
                             f"got {num_proc} and {num_prefetch}")
        self.ds = ds
        self.num_proc = int(num_proc)
        self.num_prefetch = int(num_prefetch)
        self._size = _size_or_minus_one(ds)
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
                    item = self._queue.get(timeout=_LIVENESS_INTERVAL)
                except queue_mod.Empty:
                    continue
                if type(item) is _WorkerFailure:
                    raise item.error()
                return pickle.loads(item)
            # drain: the dead worker may have queued its traceback
            end = time.monotonic() + 1.0
            while time.monotonic() < end:
                try:
                    item = self._queue.get(timeout=0.1)
                except queue_mod.Empty:
                    break
                if type(item) is _WorkerFailure:
                    raise item.error()
            raise self._workers.death_error(dead)

    def __iter__(self) -> Iterator[Any]:
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
            self._put(_WorkerFailure(self.owner, self.idx, None, traceback.format_exc()))


def _release_threads(threads, q) -> None:
    for t in threads:
        t.stop()
    for t in threads:
        if t.is_alive():
            t.join(1.0)


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

    def __init__(self, get_df: Callable[[], Any], num_prefetch: int, num_thread: int):
        super().__init__()
        if not callable(get_df):
            raise TypeError(f"MultiThreadRunner: get_df must be a function returning a DataFlow, "
                            f"got {type(get_df).__name__}")
        if int(num_thread) < 1 or int(num_prefetch) < 1:
            raise ValueError(f"MultiThreadRunner: num_thread and num_prefetch must be >= 1, "
                             f"got {num_thread} and {num_prefetch}")
        self.num_thread = int(num_thread)
        self._queue: queue_mod.Queue = queue_mod.Queue(int(num_prefetch))
        name = type(self).__name__
        self._threads = [_RunnerThread(get_df(), self._queue, i, name) for i in range(self.num_thread)]
        self._size = _size_or_minus_one(self._threads[0].df)

    def __len__(self) -> int:
        return self._threads[0].df.__len__()

    def reset_state(self) -> None:
        self._begin_reset()
        self._finalizer = weakref.finalize(self, _release_threads, self._threads, self._queue)
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
            if type(item) is _WorkerFailure:
                raise item.error()
            return item

    def __iter__(self) -> Iterator[Any]:
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
