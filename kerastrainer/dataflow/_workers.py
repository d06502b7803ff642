"""The worker-process plumbing shared by the parallel DataFlows of this package.

Owns: forking the workers (:class:`WorkerProcesses`: the registry of one runner's
processes, its per-run message token, liveness checks and the error for workers that
died), what a worker does first (:func:`worker_prologue`: die with the parent, leave
Ctrl-C to it, no huge pages), how a worker reports a failure and how the consumer turns
it into :class:`DataFlowWorkerError` (:func:`report_failure_and_exit`,
:func:`raise_if_error_frames`, :class:`WorkerFailure`), receiving from the workers'
local ZeroMQ socket with liveness checks (:func:`recv_checked`, :func:`fail_for_dead`),
the options and address of that socket (:func:`secure_local_socket`,
:func:`new_ipc_address`, :func:`check_max_message_bytes`) and the finalizers that stop
processes and threads (:func:`release_zmq`, :func:`release_threads`).

Leaves to others: the encoding of datapoints to :mod:`.wire`, the shared-memory batch
transport to :mod:`._shm`, the runners (what the workers compute, how their outputs
are merged) to :mod:`.parallel` and :mod:`.parallel_map`. The names here are public
within ``kerastrainer.dataflow`` only; users import :class:`DataFlowWorkerError` from
:mod:`kerastrainer.dataflow.parallel`.
"""
from __future__ import annotations

import hmac
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import uuid
from typing import Callable, List, Optional

import msgpack
import zmq

from ..utils import logger
from ..utils.casting import whole_number
from ..utils.interrupt import keep_interrupts_from_finalizers
from ..utils.concurrency import (describe_exitcode, die_with_parent, mp_fork_context, no_numpy_huge_pages,
                                 opencv_threads_idle, stop_processes)
from .wire import DEFAULT_MAX_MESSAGE_BYTES

# package-internal: no __all__, nothing here for ``from kerastrainer.dataflow import *``

ERROR_MARKER = b"KTERR"      # first frame of a worker's error message
LIVENESS_INTERVAL = 0.5      # seconds between worker liveness checks while data flows
_POLL_MS = 1000
_TOKEN_BYTES = 16


class DataFlowWorkerError(RuntimeError):
    """A DataFlow worker (process or thread) raised an exception or died."""


# its documented path (tensorpack's module of the runners), in reprs, tracebacks and pickles
DataFlowWorkerError.__module__ = "kerastrainer.dataflow.parallel"


def size_or_minus_one(ds) -> int:
    """``len(ds)``, or -1 when ``ds`` has no length."""
    try:
        return len(ds)
    except (NotImplementedError, TypeError):
        return -1


def format_failure(owner: str, idx: int, pid: Optional[int], tb: str) -> str:
    who = f"worker {idx}" + (f" (pid {pid})" if pid is not None else "")
    return f"{who} of {owner} raised an exception:\n{tb.rstrip()}"


class WorkerFailure:
    """What a queue worker (process or thread) puts in its queue when it raises."""

    def __init__(self, owner: str, idx: int, pid: Optional[int], tb: str):
        self.owner, self.idx, self.pid, self.tb = owner, idx, pid, tb

    def error(self) -> DataFlowWorkerError:
        return DataFlowWorkerError(format_failure(self.owner, self.idx, self.pid, self.tb))


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
            msg = format_failure(info["owner"], info["worker"], info["pid"], info["traceback"])
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


MAX_NUM_PROC = 1024      # forks of this process; more is no data pipeline but a fork bomb
_FDS_PER_WORKER = 4      # measured: ~3.3 descriptors of the consumer per worker (socket, pipes, sentinel)
_FDS_RESERVE = 64        # for everything else the process opens


def check_num_proc(num_proc: int, who: str) -> int:
    """Refuse a worker count this process cannot run, before forking any (``ValueError`` saying why).

    The bound is the smaller of :data:`MAX_NUM_PROC` and what the open-file limit
    (``RLIMIT_NOFILE``) and the process limit (``RLIMIT_NPROC``) leave room for.
    """
    bounds = [(MAX_NUM_PROC, f"the most worker processes kerastrainer starts ({MAX_NUM_PROC})")]
    try:
        import resource
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if nofile != resource.RLIM_INFINITY:
            try:
                in_use = len(os.listdir("/proc/self/fd"))
            except OSError:
                in_use = 0
            room = max(0, (nofile - in_use - _FDS_RESERVE) // _FDS_PER_WORKER)
            bounds.append((room, f"what the open-file limit of {nofile} (ulimit -n) leaves room for, at about "
                                 f"{_FDS_PER_WORKER} descriptors per worker"))
        nproc = resource.getrlimit(resource.RLIMIT_NPROC)[0]
        if nproc != resource.RLIM_INFINITY:
            bounds.append((max(0, nproc - 64), f"the process limit of {nproc} (ulimit -u)"))
    except (ImportError, OSError, ValueError):
        pass
    limit, why = min(bounds)
    if num_proc > limit:
        raise ValueError(f"{who}: num_proc={num_proc} is more than this process can run: at most {limit}, "
                         f"{why}. This machine has {os.cpu_count()} CPU cores; use about that many workers "
                         "(more only for I/O-bound work).")
    return num_proc


def check_max_message_bytes(value: Optional[int], who: str) -> Optional[int]:
    """None (no limit) or a whole number of bytes in [1024, 2**62] (ZMQ_MAXMSGSIZE is an int64)."""
    if value is None:
        return None
    try:
        n = whole_number(value, f"{who}(max_message_bytes=...)")
    except TypeError as e:   # '1e9', True: one clear ValueError for any bad value
        raise ValueError(f"{who}: max_message_bytes must be None (no limit) or a whole number of bytes "
                         f">= 1024, got {value!r}") from e
    if not 1024 <= n <= 1 << 62:
        raise ValueError(f"{who}: max_message_bytes must be None (no limit) or a whole number of bytes "
                         f">= 1024 (and at most 2**62), got {value!r}")
    return n


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


def worker_prologue(parent_pid: int, use_pdeathsig: bool) -> None:
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
        if not force and now - self._last_check < LIVENESS_INTERVAL:
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


def release_zmq(workers_procs, sockets, ctx, tmpdir, owner_pid, closers=()) -> None:
    """Finalizer of a ZeroMQ runner: stop its processes, close its sockets, remove its temp dir."""
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


def release_threads(threads, q) -> None:
    """Finalizer of a threaded runner: stop its threads and give them a second each to end."""
    for t in threads:
        t.stop()
    for t in threads:
        if t.is_alive():
            t.join(1.0)
