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

Example::

    ds = MultiProcessRunnerZMQ(MyBatchedDataFlow(), num_proc=2)
    ds.reset_state()
    for img, label in ds:
        ...
    ds.close()
"""
from __future__ import annotations

import ctypes
import hmac
import itertools
import mmap
import os
import pickle
import queue as queue_mod
import select
import shutil
import signal
import socket
import struct
import sys
import tempfile
import threading
import time
import traceback
import uuid
import weakref
from typing import Any, Callable, Iterator, List, Optional

import msgpack
import zmq

from ..utils import logger
from ..utils.interrupt import keep_interrupts_from_finalizers
from ..utils.concurrency import (StoppableThread, opencv_threads_idle, describe_exitcode, die_with_parent, mp_fork_context,
                                 no_numpy_huge_pages, stop_processes)
from .base import DataFlow, DataFlowReentrantGuard
from .wire import DEFAULT_MAX_MESSAGE_BYTES, check_message_size, dumps_frames, loads_frames, message_nbytes

__all__ = ["MultiProcessRunnerZMQ", "MultiProcessRunner", "MultiThreadRunner", "DataFlowWorkerError"]

ERROR_MARKER = b"KTERR"      # first frame of a worker's error message
_LIVENESS_INTERVAL = 0.5     # seconds between worker liveness checks while data flows
_POLL_MS = 1000
_TOKEN_BYTES = 16


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


def report_failure_and_exit(sock: zmq.Socket, ctx: zmq.Context, owner: str, idx: int, token: bytes) -> None:
    """In a worker, inside ``except``: send the exception to the consumer, then exit."""
    sock.sndtimeo = 5000
    try:
        sock.send_multipart([token] + error_frames(owner, idx))
    except zmq.ZMQError:
        pass
    sock.close(linger=5000)
    ctx.term()
    sys.exit(1)


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


def secure_local_socket(sock: zmq.Socket, max_message_bytes: Optional[int]) -> None:
    """Options of a consumer's local socket: the size limit, and this user's processes only."""
    if max_message_bytes is not None:
        sock.maxmsgsize = int(max_message_bytes)
    try:  # refuse ipc connections from other users (libzmq built with SO_PEERCRED)
        sock.setsockopt(zmq.IPC_FILTER_UID, os.getuid())
    except (AttributeError, zmq.ZMQError):
        pass


def check_max_message_bytes(value: Optional[int], who: str) -> Optional[int]:
    if value is None:
        return None
    if int(value) < 1024:
        raise ValueError(f"{who}: max_message_bytes must be None (no limit) or >= 1024, got {value!r}")
    return int(value)


def new_ipc_address(prefix: str) -> tuple:
    """(``ipc://`` address, temp dir holding the socket file or None).

    On Linux the socket lives in the abstract namespace (``ipc://@name``): no file,
    so nothing is left behind even when the process is killed. Elsewhere it is a
    file in a fresh temp dir, with a path that fits the 107-byte limit.
    """
    if sys.platform.startswith("linux"):
        return f"ipc://@{prefix}{os.getpid()}-{uuid.uuid4().hex}", None
    base = tempfile.gettempdir()
    if len(base) > 60:  # a long TMPDIR would overflow sockaddr_un
        base = "/tmp"
    d = tempfile.mkdtemp(prefix=prefix, dir=base)
    return "ipc://" + os.path.join(d, "sock"), d


def _on_main_thread() -> bool:
    # PR_SET_PDEATHSIG fires when the forking *thread* ends: only trust it from the main thread
    return threading.current_thread() is threading.main_thread()


def _worker_prologue(parent_pid: int, use_pdeathsig: bool) -> None:
    """First thing in a forked worker: die with the parent; leave Ctrl-C to the parent;
    no huge pages for the batches it makes and drops."""
    die_with_parent(parent_pid, use_pdeathsig)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    no_numpy_huge_pages()


class WorkerProcesses:
    """The forked worker processes of one runner, and how to tell whether they are alive."""

    def __init__(self, owner: str, max_message_bytes: Optional[int] = DEFAULT_MAX_MESSAGE_BYTES):
        self.owner = owner
        self.procs: list = []
        self._last_check = 0.0
        self.token = os.urandom(_TOKEN_BYTES)   # every message of our workers starts with it
        self.max_message_bytes = max_message_bytes
        self.num_malformed = 0

    def accept(self, frames: list, router: bool) -> Optional[list]:
        """``frames`` without the token frame if they come from our workers; else None (counted).

        ``router``: the first frame is a ROUTER socket's peer identity (kept).
        """
        k = 1 if router else 0
        # (sizes are checked by the workers before sending, and per frame by zmq's maxmsgsize)
        if len(frames) > k + 1 and hmac.compare_digest(frames[k].bytes, self.token):
            return frames[:k] + frames[k + 1:]
        self.num_malformed += 1
        n = self.num_malformed
        if n <= 5 or n % 1000 == 0:
            logger.warning("%s: dropped a message of %d frame(s) on its local socket that did not come from "
                           "its workers (%d so far). Another local process is writing to it.",
                           self.owner, len(frames), n)
        return None

    def start(self, target: Callable, args_of: Callable[[int], tuple], num: int) -> None:
        ctx = mp_fork_context()
        use_pdeathsig = _on_main_thread()
        parent = os.getpid()
        # the consumer's batches free shared-memory slots in finalizers: a Ctrl-C landing in one
        # must not be lost (the consumer's loop would go on, the workers with it)
        keep_interrupts_from_finalizers()
        with opencv_threads_idle():
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
                 timeout: Optional[float] = None, router: bool = False) -> list:
    """Receive one multipart message of our workers (token frame removed), raising as soon as
    a worker dies or reports an error. Messages of other processes are dropped and counted.

    ``poller`` must watch ``sock`` and the workers' sentinels.
    """
    dead = workers.check()
    while not dead:
        try:
            frames = workers.accept(sock.recv_multipart(flags=zmq.NOBLOCK, copy=False), router)
        except zmq.Again:
            break
        if frames is not None:
            raise_if_error_frames(frames)
            return frames
    deadline = None if timeout is None else time.monotonic() + timeout
    while not dead:
        events = dict(poller.poll(_POLL_MS))
        if sock in events:
            frames = workers.accept(sock.recv_multipart(flags=zmq.NOBLOCK, copy=False), router)
            if frames is not None:
                raise_if_error_frames(frames)
                return frames
            continue
        dead = workers.check(force=True)
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"{workers.owner}: no datapoint arrived within {timeout} s")
    fail_for_dead(sock, workers, dead, router)


def fail_for_dead(sock: zmq.Socket, workers: WorkerProcesses, dead: list, router: bool = False) -> None:
    """Raise the error of the dead workers: the traceback one of them sent, or how it died."""
    # A worker that raised sent its traceback just before exiting: look for it.
    end = time.monotonic() + 1.0
    while time.monotonic() < end and sock.poll(300, zmq.POLLIN):
        frames = workers.accept(sock.recv_multipart(copy=False), router)
        if frames is not None:
            raise_if_error_frames(frames)  # data is dropped: we fail anyway
    raise workers.death_error(dead)


def _release_zmq(workers_procs, sockets, ctx, tmpdir, owner_pid, closers=()) -> None:
    # Runs from close(), garbage collection or interpreter exit: never references the runner.
    if os.getpid() != owner_pid:  # a forked child holds a copy of this finalizer
        return
    stop_processes(workers_procs)
    for c in closers:
        c.close()
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


# ----------------------------------------------------------------------------
# MultiProcessRunnerZMQ
# ----------------------------------------------------------------------------

# ----------------------------------------------------------------------------
# shared-memory slots: large arrays skip the socket
# ----------------------------------------------------------------------------
# A worker copies the large arrays of a datapoint into a "slot" (a memfd mapped by
# both processes) and sends only the header over zmq. The memfd travels once per slot
# over a UNIX datagram socketpair (SCM_RIGHTS). The consumer builds its arrays on the
# mapping and reports back on that socketpair when it has received a slot ('R') and
# when the last array using it is garbage collected ('F'). When every slot is held
# by the consumer (it keeps the arrays), the worker falls back to sending frames.
# memfds are anonymous: nothing is left behind, whoever is killed.

SHM_MARKER = b"KTS1"
SHM_MIN_BYTES = 1 << 20       # datapoints with fewer array bytes go through zmq frames
_SHM_MAX_SLOTS = 16           # per worker
_SHM_HDR = struct.Struct("<IIIH")   # worker, slot, generation, number of arrays
_SHM_BUF = struct.Struct("<QQ")     # offset, size
_SHM_FD = struct.Struct("<III")     # slot, generation, capacity
_SHM_ACK = struct.Struct("<cI")     # b'R' received / b'F' freed, slot


def shm_supported() -> bool:
    return hasattr(os, "memfd_create") and hasattr(socket, "send_fds")


class _ShmWriter:
    """Worker side: a growing pool of slots, each a memfd mapped here and by the consumer."""

    def __init__(self, chan: socket.socket, worker: int, max_slots: int):
        self.chan, self.worker, self.max_slots = chan, worker, max_slots
        self.maps: list = []     # mmap per slot
        self.gens: list = []
        self.state: list = []    # 'free' | 'queued' (sent, not received) | 'held' (consumer has it)

    def _drain(self, timeout: float = 0.0) -> None:
        if timeout and not select.select([self.chan], [], [], timeout)[0]:
            return
        while True:
            try:
                msg = self.chan.recv(16, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return
            kind, slot = _SHM_ACK.unpack(msg)
            if 0 <= slot < len(self.state):
                if kind == b"F":
                    self.state[slot] = "free"
                elif kind == b"R" and self.state[slot] == "queued":
                    self.state[slot] = "held"

    def _new_mapping(self, slot: int, size: int) -> None:
        size = max(size, 1 << 16)
        fd = os.memfd_create(f"kerastrainer-slot{slot}", getattr(os, "MFD_CLOEXEC", 0))
        try:
            os.ftruncate(fd, size)
            mm = mmap.mmap(fd, size)
            gen = self.gens[slot] + 1 if slot < len(self.gens) else 1
            socket.send_fds(self.chan, [_SHM_FD.pack(slot, gen, size)], [fd])
        finally:
            os.close(fd)
        if slot < len(self.maps):
            self.maps[slot].close()
            self.maps[slot], self.gens[slot] = mm, gen
        else:
            self.maps.append(mm)
            self.gens.append(gen)
            self.state.append("free")

    def _acquire(self, size: int) -> Optional[int]:
        self._drain()
        while True:
            free = [i for i, st in enumerate(self.state) if st == "free"]
            fits = [i for i in free if len(self.maps[i]) >= size]
            if fits:
                return fits[0]
            if free:
                self._new_mapping(free[0], size)
                return free[0]
            if len(self.state) < self.max_slots:
                self._new_mapping(len(self.state), size)
                return len(self.state) - 1
            if "queued" not in self.state:
                return None   # the consumer holds every slot: send a copy instead of waiting
            self._drain(timeout=1.0)  # back-pressure: wait for the consumer to take one

    def frames(self, dp) -> list:
        frames = dumps_frames(dp)
        bufs = frames[1:]
        if not bufs:
            return frames
        layout, end = [], 0
        for b in bufs:
            end += -end % 64
            layout.append((end, b.nbytes))
            end += b.nbytes
        if end < SHM_MIN_BYTES:
            return frames
        slot = self._acquire(end)
        if slot is None:
            return frames
        mm = self.maps[slot]
        for (off, size), b in zip(layout, bufs):
            mm[off:off + size] = b
        self.state[slot] = "queued"
        head = _SHM_HDR.pack(self.worker, slot, self.gens[slot], len(bufs))
        return [SHM_MARKER + head + b"".join(_SHM_BUF.pack(*x) for x in layout), frames[0]]


def _slot_channel() -> tuple:
    """A UNIX datagram socketpair with room for thousands of slot acknowledgements."""
    pair = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    for sock in pair:
        for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            try:
                sock.setsockopt(socket.SOL_SOCKET, opt, 4 << 20)
            except OSError:
                pass
    return pair


def _release_slot(chan: socket.socket, slot: int) -> None:
    # runs when the last array on a slot is garbage collected, in any thread
    try:
        chan.send(_SHM_ACK.pack(b"F", slot), socket.MSG_DONTWAIT)
    except OSError:
        pass


class _ShmReader:
    """Consumer side: maps the workers' slots and turns slot messages into arrays."""

    def __init__(self, chans: list):
        self.chans = chans
        self.maps: dict = {}   # (worker, slot) -> (generation, mmap)

    def _receive_fd(self, worker: int) -> None:
        chan = self.chans[worker]
        if not select.select([chan], [], [], 10.0)[0]:
            raise DataFlowWorkerError(f"worker {worker} announced a shared-memory slot that never arrived")
        msg, fds, _, _ = socket.recv_fds(chan, 64, 1)
        if len(fds) != 1 or len(msg) != _SHM_FD.size:
            for fd in fds:
                os.close(fd)
            raise DataFlowWorkerError(f"worker {worker} sent a malformed shared-memory message")
        slot, gen, size = _SHM_FD.unpack(msg)
        try:
            self.maps[(worker, slot)] = (gen, mmap.mmap(fds[0], size))
        finally:
            os.close(fds[0])

    def decode(self, frames):
        raw = frames[0].bytes
        n0 = len(SHM_MARKER) + _SHM_HDR.size
        worker, slot, gen, nbuf = _SHM_HDR.unpack_from(raw, len(SHM_MARKER))
        if not 0 <= worker < len(self.chans) or len(raw) != n0 + nbuf * _SHM_BUF.size or len(frames) != 2:
            raise ValueError("Malformed shared-memory message from a worker")
        while self.maps.get((worker, slot), (0, None))[0] < gen:
            self._receive_fd(worker)
        chan = self.chans[worker]
        try:
            chan.send(_SHM_ACK.pack(b"R", slot), socket.MSG_DONTWAIT)
        except OSError:
            pass
        mm = self.maps[(worker, slot)][1]
        layout = [_SHM_BUF.unpack_from(raw, n0 + i * _SHM_BUF.size) for i in range(nbuf)]
        end = max(off + size for off, size in layout)
        cbuf = (ctypes.c_char * end).from_buffer(mm)
        whole = memoryview(cbuf).cast("B")
        weakref.finalize(cbuf, _release_slot, chan, slot)
        return loads_frames([frames[1]] + [whole[off:off + size] for off, size in layout])


def _zmq_runner_worker(parent_pid, use_pdeathsig, ds, addr, hwm, idx, owner, chan, token, max_bytes):
    _worker_prologue(parent_pid, use_pdeathsig)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.sndhwm = hwm
    sock.connect(addr)
    encode = _ShmWriter(chan, idx, min(hwm, _SHM_MAX_SLOTS)).frames if chan is not None else dumps_frames
    try:
        ds.reset_state()
        while True:
            n = 0
            for dp in ds:
                frames = encode(dp)
                if max_bytes is not None:
                    check_message_size(message_nbytes(frames), max_bytes, f"{owner} worker {idx}")
                sock.send_multipart([token] + frames, copy=False)
                n += 1
            if n == 0:
                raise RuntimeError(f"The DataFlow {type(ds).__name__} given to {owner} yielded no datapoint "
                                   "in a whole pass; the worker would spin forever.")
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
        self.max_message_bytes = check_max_message_bytes(max_message_bytes, type(self).__name__)
        if shared_memory and not shm_supported():
            raise ValueError("MultiProcessRunnerZMQ: shared_memory=True needs Linux (os.memfd_create); "
                             "leave it as None to use it where available.")
        self.shared_memory = shm_supported() if shared_memory is None else bool(shared_memory)
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
        self._finalizer = weakref.finalize(self, _release_zmq, self._workers.procs, [sock], ctx, tmpdir,
                                           os.getpid(), self._closers)
        sock.bind(addr)
        self._sock = sock
        self.address = addr
        # one socketpair per worker for shared-memory slots; the worker's end is closed here after fork
        pairs = [_slot_channel() if self.shared_memory else (None, None) for _ in range(self.num_proc)]
        self._chans = [a for a, _ in pairs]
        self._shm = _ShmReader(self._chans) if self.shared_memory else None
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

    __iter__ = _RunnerBase._iterate_queue

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

    __iter__ = _RunnerBase._iterate_queue

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

