"""Apply a function to every datapoint of a DataFlow in parallel processes or threads.

The parent iterates ``ds`` once per ``__iter__`` call and hands datapoints to the
workers, keeping up to ``buffer_size`` of them in flight; workers apply
``map_func`` and send the results back. A ``map_func`` that returns None drops the
datapoint. Outputs come in completion order, not input order.

- ``strict=False`` (default): the buffer stays full across passes, so the outputs
  of the last inputs of one pass may be yielded by the next ``__iter__`` call. Each
  call still yields one output per input of one pass (fewer when ``map_func``
  returns None).
- ``strict=True``: each call yields exactly the outputs of the inputs of that
  pass (one per input, minus the Nones), draining the buffer at the end of the pass.
  If a pass is abandoned half-way, its late results are discarded by the next one.

This module holds the map runners and their buffering; it leaves the worker-process
plumbing (forking, parent death, the message token, receiving with liveness checks,
worker errors) to :mod:`._workers` and the encoding of datapoints to :mod:`.wire`.

Example::

    ds = MultiProcessMapDataZMQ(FileNames(), num_proc=4, map_func=decode_and_augment)
    ds.reset_state()
    for img, label in ds:
        ...
    ds.close()
"""
from __future__ import annotations

import os
import queue as queue_mod
import struct
import time
import traceback
import weakref
from abc import abstractmethod
from typing import Any, Callable, Iterator, Optional

import zmq

from .base import DataFlowReentrantGuard, DataFlowSizeUnknown, ProxyDataFlow
from .common import BatchData, RepeatedData
from ._workers import (DataFlowWorkerError, WorkerFailure, WorkerProcesses, check_max_message_bytes, check_num_proc,
                       fail_for_dead, new_ipc_address, raise_if_error_frames, recv_checked, release_threads,
                       release_zmq, report_failure_and_exit, secure_local_socket, worker_prologue)
from ..utils import logger
from ..utils.casting import whole_number
from ..utils.concurrency import StoppableThread
from .wire import DEFAULT_MAX_MESSAGE_BYTES, check_message_size, dumps_frames, loads_frames, message_nbytes

__all__ = ["MultiProcessMapDataZMQ", "MultiProcessMapData", "MultiThreadMapData",
           "MultiProcessMapAndBatchDataZMQ", "MultiProcessMapAndBatchData"]

_TAG = struct.Struct("<Q")   # pass number, echoed by workers so strict mode can drop stale results
_HELLO = b"H"
_DATA = b"D"
_NONE = b"N"
_NO_OUTPUT = object()        # a result to drop: map_func returned None, or it came from an abandoned pass


class _ParallelMapBase(ProxyDataFlow):
    """The buffering logic; subclasses move datapoints to and from their workers."""

    def __init__(self, ds, map_func: Callable, buffer_size: int, strict: bool):
        super().__init__(ds)
        name = type(self).__name__
        if not callable(map_func):
            raise TypeError(f"{name}: map_func must be callable, got {type(map_func).__name__}")
        # counts are whole numbers: int(2.7) would buffer 2 without saying so
        self.buffer_size = whole_number(buffer_size, f"{name}(buffer_size=...)", minimum=1)
        self.map_func = map_func
        self.strict = bool(strict)
        self._guard = DataFlowReentrantGuard(name)
        self._reset_done = False
        self._closed = False
        self._finalizer = None
        self._in_flight = 0
        self._pass = 0
        self._input_iter = None     # non-strict: the pass iterator being consumed
        self._sent_of_next = 0      # non-strict: inputs already sent from self._input_iter

    # -- subclass interface ---------------------------------------------------
    @abstractmethod
    def _start_workers(self) -> None:
        ...

    @abstractmethod
    def _send(self, dp, tag: int) -> None:
        ...

    @abstractmethod
    def _recv(self):
        """One result: (tag, output) where output is ``_NO_OUTPUT`` for a dropped datapoint."""

    def _check_workers(self) -> None:
        """Called at the end of each pass: raise now if a worker has failed."""

    # -- DataFlow protocol ------------------------------------------------------
    def reset_state(self) -> None:
        if self._reset_done:
            raise RuntimeError(f"reset_state() was already called on this {type(self).__name__}; "
                               "call it once per process.")
        self._reset_done = True
        self.ds.reset_state()
        self._start_workers()

    def close(self) -> None:
        """Stop the workers, release sockets and files, and close ``ds``; safe to call twice."""
        self._closed = True
        if self._finalizer is not None:
            self._finalizer()
        super().close()

    def __del__(self):
        try:
            if self._finalizer is not None:
                self._finalizer()
        except Exception:
            pass

    def _check_ready(self) -> None:
        if self._closed:
            raise RuntimeError(f"This {type(self).__name__} is closed; create a new one.")
        if not self._reset_done:
            raise RuntimeError(f"Call reset_state() on this {type(self).__name__} before iterating it.")

    def _put(self, dp) -> None:
        self._send(dp, self._pass)
        self._in_flight += 1

    def _take(self):
        tag, out = self._recv()
        self._in_flight -= 1
        if self.strict and tag != self._pass:
            return _NO_OUTPUT
        return out

    def __iter__(self) -> Iterator[Any]:
        self._check_ready()
        with self._guard:
            try:
                if self.strict:
                    yield from self._iter_strict()
                else:
                    yield from self._iter_non_strict()
            except (DataFlowWorkerError, zmq.ZMQError):
                self.close()
                raise

    def _iter_strict(self):
        self._pass += 1
        it = iter(self.ds)
        exhausted = False
        while True:
            while not exhausted and self._in_flight < self.buffer_size:
                try:
                    dp = next(it)
                except StopIteration:
                    exhausted = True
                    break
                self._put(dp)
            if self._in_flight == 0:
                self._check_workers()
                return
            # results of an abandoned earlier pass are dropped by _take (tag mismatch)
            out = self._take()
            if out is not _NO_OUTPUT:
                yield out

    def _iter_non_strict(self):
        # The inputs form an endless stream of passes over ds. This call yields one output
        # per input of the current pass; to keep workers busy it may already send inputs of
        # the next pass, which the next call then counts as its own.
        if self._input_iter is None:
            self._input_iter = iter(self.ds)
            self._sent_of_next = 0
        current_sent = self._sent_of_next   # inputs of this pass sent by the previous call
        self._sent_of_next = 0
        quota = None                         # inputs of this pass, known once it ends
        prefetching_next = False
        outputs = 0
        while True:
            while self._in_flight < self.buffer_size:
                try:
                    dp = next(self._input_iter)
                except StopIteration:
                    if prefetching_next:
                        # the next pass ended too (ds is shorter than the buffer): stop filling
                        self._input_iter = iter(self.ds)
                        self._sent_of_next = 0
                        break
                    quota = current_sent
                    prefetching_next = True
                    self._input_iter = iter(self.ds)
                    continue
                self._put(dp)
                if prefetching_next:
                    self._sent_of_next += 1
                else:
                    current_sent += 1
            if (quota is not None and outputs >= quota) or self._in_flight == 0:
                self._check_workers()
                return
            out = self._take()
            outputs += 1
            if out is not _NO_OUTPUT:
                yield out


# ----------------------------------------------------------------------------
# processes
# ----------------------------------------------------------------------------

def _map_worker(parent_pid, use_pdeathsig, map_func, addr, hwm, idx, owner, token, max_bytes):
    worker_prologue(parent_pid, use_pdeathsig)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.sndhwm = sock.rcvhwm = hwm
    sock.connect(addr)
    try:
        sock.send_multipart([token, _HELLO, _TAG.pack(idx)])
        while True:
            frames = sock.recv_multipart(copy=False)
            tag = frames[0].bytes
            out = map_func(loads_frames(frames[1:]))
            if out is None:
                sock.send_multipart([token, _NONE, tag])
            else:
                out_frames = dumps_frames(out)
                if max_bytes is not None:
                    check_message_size(message_nbytes(out_frames), max_bytes, f"{owner} worker {idx}")
                sock.send_multipart([token, _DATA, tag] + out_frames, copy=False)
    except Exception:
        report_failure_and_exit(sock, ctx, owner, idx, token)


class MultiProcessMapDataZMQ(_ParallelMapBase):
    """Map ``map_func`` over ``ds`` in ``num_proc`` forked processes (ZeroMQ ROUTER/DEALER).

    The parent iterates ``ds`` and sends each datapoint to the least busy worker;
    results come back in completion order. See the module docstring for ``strict``.
    A worker that raises makes the consumer raise :class:`DataFlowWorkerError` with
    its traceback; a worker that dies makes it raise within about a second.

    The local socket takes messages of its own workers only (a per-run token, same-user
    connections, frames up to ``max_message_bytes``, default 1 GiB): anything else is
    dropped and counted in ``num_malformed``, never fatal (see
    :mod:`kerastrainer.dataflow.parallel`). A result over ``max_message_bytes`` makes
    its worker fail with an error saying so (None: no limit).

    Example::

        ds = MultiProcessMapDataZMQ(ds, num_proc=4, map_func=lambda dp: [augment(dp[0]), dp[1]])
    """

    def __init__(self, ds, num_proc: int, map_func: Callable, buffer_size: int = 200, strict: bool = False,
                 max_message_bytes: Optional[int] = DEFAULT_MAX_MESSAGE_BYTES):
        super().__init__(ds, map_func, buffer_size, strict)
        name = type(self).__name__
        self.max_message_bytes = check_max_message_bytes(
            None if max_message_bytes is None else whole_number(max_message_bytes, f"{name}(max_message_bytes=...)"),
            name)
        self.num_proc = check_num_proc(whole_number(num_proc, f"{name}(num_proc=...)", minimum=1), name)
        self._sock = None
        self._workers = None
        self._load = []

    @property
    def num_malformed(self) -> int:
        """Messages dropped on the local socket because they did not come from the workers."""
        return self._workers.num_malformed if self._workers is not None else 0

    def _start_workers(self) -> None:
        name = type(self).__name__
        self._workers = WorkerProcesses(name, self.max_message_bytes)
        addr, tmpdir = new_ipc_address("kt-map-")
        ctx = zmq.Context()
        sock = ctx.socket(zmq.ROUTER)
        # buffer_size bounds what is in flight; the HWM must never drop or block below it
        sock.sndhwm = sock.rcvhwm = self.buffer_size * 2 + 10
        sock.router_mandatory = 1
        secure_local_socket(sock, self.max_message_bytes)
        self._finalizer = weakref.finalize(self, release_zmq, self._workers.procs, [sock], ctx, tmpdir,
                                           os.getpid())
        sock.bind(addr)
        self._sock = sock
        self.address = addr
        hwm = self.buffer_size + 10
        token, max_bytes = self._workers.token, self.max_message_bytes
        self._workers.start(_map_worker, lambda i: (self.map_func, addr, hwm, i, name, token, max_bytes),
                            self.num_proc)
        self._poller = zmq.Poller()
        self._poller.register(sock, zmq.POLLIN)
        for s in self._workers.sentinels:
            self._poller.register(s, zmq.POLLIN)
        # wait until every worker is connected, so work is spread from the first datapoint
        self._ids = [None] * self.num_proc   # zmq identity of worker i
        while None in self._ids:
            frames = recv_checked(sock, self._workers, self._poller, timeout=60, router=True)
            if len(frames) == 3 and frames[1].bytes == _HELLO and len(frames[2].bytes) == _TAG.size:
                i = _TAG.unpack(frames[2].bytes)[0]
                if 0 <= i < self.num_proc:
                    self._ids[i] = frames[0].bytes
        self._load = [0] * self.num_proc
        self._index = {ident: i for i, ident in enumerate(self._ids)}

    def _check_workers(self) -> None:
        dead = self._workers.check(force=True)
        if dead:
            fail_for_dead(self._sock, self._workers, dead, router=True)

    def _send(self, dp, tag: int) -> None:
        i = min(range(self.num_proc), key=self._load.__getitem__)
        self._load[i] += 1
        try:
            self._sock.send_multipart([self._ids[i], _TAG.pack(tag)] + dumps_frames(dp), copy=False)
        except zmq.ZMQError as e:  # EHOSTUNREACH (router_mandatory): the worker has gone away
            self._explain_lost_worker(i, e)

    def _explain_lost_worker(self, i: int, err: Exception) -> None:
        # The worker closed its socket: it failed (its error message is on the way) or is dying.
        end = time.monotonic() + 5.0
        while time.monotonic() < end:
            dead = self._workers.check(force=True)
            if dead:
                raise self._workers.death_error(dead) from None
            if self._sock.poll(100, zmq.POLLIN):
                frames = self._workers.accept(self._sock.recv_multipart(copy=False), router=True)
                if frames is not None:
                    raise_if_error_frames(frames)  # results are moot now
        raise DataFlowWorkerError(f"{type(self).__name__}: worker {i} (pid {self._workers.procs[i].pid}) "
                                  f"disconnected ({err})") from None

    def _recv(self):
        while True:
            frames = recv_checked(self._sock, self._workers, self._poller, router=True)
            ident = frames[0].bytes
            if len(frames) >= 3 and ident in self._index and len(frames[2].bytes) == _TAG.size:
                break
            # a worker's late HELLO, or a message we cannot place: never a result
            logger.warning("%s: ignored an unexpected message of %d frames on its local socket",
                           type(self).__name__, len(frames))
        self._load[self._index[ident]] -= 1
        kind = frames[1].bytes
        tag = _TAG.unpack(frames[2].bytes)[0]
        if kind == _NONE:
            return tag, _NO_OUTPUT
        return tag, loads_frames(frames[3:])


MultiProcessMapData = MultiProcessMapDataZMQ


# ----------------------------------------------------------------------------
# threads
# ----------------------------------------------------------------------------

class _MapThread(StoppableThread):
    def __init__(self, map_func, in_q, out_q, idx, owner):
        super().__init__(name=f"{owner}-{idx}")
        self.map_func, self.in_q, self.out_q, self.idx, self.owner = map_func, in_q, out_q, idx, owner

    def run(self):
        while not self.stopped():
            try:
                tag, dp = self.in_q.get(timeout=0.2)
            except queue_mod.Empty:
                continue
            try:
                out = self.map_func(dp)
            except Exception:
                self.out_q.put((tag, WorkerFailure(self.owner, self.idx, None, traceback.format_exc())))
                return
            self.out_q.put((tag, _NO_OUTPUT if out is None else out))


class MultiThreadMapData(_ParallelMapBase):
    """Map ``map_func`` over ``ds`` with ``num_thread`` threads (same semantics as
    :class:`MultiProcessMapDataZMQ`). ``map_func`` must be thread-safe; it pays off
    when it releases the GIL (OpenCV, file I/O, most numpy).

    Example::

        ds = MultiThreadMapData(ds, num_thread=8, map_func=lambda fname: cv2.imread(fname))
    """

    def __init__(self, ds, num_thread: int, map_func: Callable, buffer_size: int = 200, strict: bool = False):
        super().__init__(ds, map_func, buffer_size, strict)
        self.num_thread = whole_number(num_thread, f"{type(self).__name__}(num_thread=...)", minimum=1)
        self._threads = []

    def _start_workers(self) -> None:
        # both queues are unbounded: _ParallelMapBase never has more than buffer_size in flight
        self._in_q: queue_mod.Queue = queue_mod.Queue()
        self._out_q: queue_mod.Queue = queue_mod.Queue()
        name = type(self).__name__
        self._threads = [_MapThread(self.map_func, self._in_q, self._out_q, i, name)
                         for i in range(self.num_thread)]
        self._finalizer = weakref.finalize(self, release_threads, self._threads, self._in_q)
        for t in self._threads:
            t.start()

    def _send(self, dp, tag: int) -> None:
        self._in_q.put((tag, dp))

    def _recv(self):
        while True:
            try:
                tag, out = self._out_q.get(timeout=0.5)
            except queue_mod.Empty:
                if self._closed:
                    raise RuntimeError(f"{type(self).__name__} was closed while being iterated") from None
                continue
            if type(out) is WorkerFailure:
                raise out.error()
            return tag, out


class MultiProcessMapAndBatchDataZMQ(ProxyDataFlow):
    """Map ``map_func`` over ``ds`` in ``num_proc`` processes and group the results into batches
    of ``batch_size`` (``map_func`` returning None drops a datapoint). As in tensorpack, ``ds`` is
    repeated forever (the DataFlow has no length) and a batch may mix datapoints of two passes.

    tensorpack batched inside the workers; here the workers map (``MultiProcessMapDataZMQ``) and
    the batches are stacked in this process: the batches are the same, the stacking costs this
    process one copy per batch.

    Example::

        ds = MultiProcessMapAndBatchDataZMQ(ds, num_proc=8, map_func=decode_and_augment, batch_size=64)
    """

    def __init__(self, ds, num_proc: int, map_func: Callable[[Any], Any], batch_size: int,
                 buffer_size: Optional[int] = None):
        if buffer_size is None:
            buffer_size = batch_size * 10
        if batch_size >= buffer_size:
            raise ValueError(f"MultiProcessMapAndBatchDataZMQ: batch_size ({batch_size}) must be smaller "
                             f"than buffer_size ({buffer_size})")
        self.num_proc, self.map_func, self.batch_size, self.buffer_size = num_proc, map_func, batch_size, buffer_size
        mapped = MultiProcessMapDataZMQ(RepeatedData(ds, -1), num_proc, map_func, buffer_size=buffer_size)
        super().__init__(BatchData(mapped, batch_size))

    def __len__(self) -> int:
        raise DataFlowSizeUnknown("MultiProcessMapAndBatchDataZMQ repeats its DataFlow forever: it has no length")

    def __iter__(self) -> Iterator[Any]:
        return iter(self.ds)


MultiProcessMapAndBatchData = MultiProcessMapAndBatchDataZMQ  # tensorpack's alias
