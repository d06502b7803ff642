"""The join of a multi-worker job: every rank checks in with rank 0 before TF's collective runtime
starts, within a time limit.

TensorFlow's own start-up (``MultiWorkerMirroredStrategy()``) waits for every task with no
limit, inside C++ and holding the GIL: a rank that never starts leaves the others waiting with
no message. So before it, each rank connects to rank 0's address (the port TF's server will
take a moment later) and says who it is; rank 0 answers once all have come, or, at the time
limit, tells those that came which ranks never did. Nothing here imports TensorFlow.

Protocol (one line each way, over TCP): ``KTJOIN <rank> <size>\\n`` from a rank, then
``GO\\n`` or ``ABORT <reason>\\n`` from rank 0.

Example::

    join_workers(['10.0.0.1:2222', '10.0.0.2:2222'], rank, timeout=600)
"""
from __future__ import annotations

import math
import os
import selectors
import socket
import time
from typing import Dict, List, Optional, Sequence

__all__ = ["join_workers", "resolve_join_timeout", "WorkerJoinError", "ENV_JOIN_TIMEOUT", "DEFAULT_JOIN_TIMEOUT"]

ENV_JOIN_TIMEOUT = "KERASTRAINER_JOIN_TIMEOUT"
DEFAULT_JOIN_TIMEOUT = 600.0
_HELLO = b"KTJOIN"
_MAX_LINE = 256
_RETRY = 0.2
# a rank that has checked in waits a little longer than rank 0, so that rank 0's list of the
# missing ranks reaches it before its own limit
_SLACK = 15.0


class WorkerJoinError(RuntimeError):
    """The workers of a job did not all join within the time limit (or joined inconsistently)."""


def resolve_join_timeout(value, what: str = "MultiWorkerTrainer(join_timeout=...)") -> float:
    """Seconds to wait for the other ranks: ``value``, else ``$KERASTRAINER_JOIN_TIMEOUT``, else
    600. ``math.inf`` (or ``'inf'`` in the variable) waits forever."""
    if value is None:
        raw = os.environ.get(ENV_JOIN_TIMEOUT, "").strip()
        if not raw:
            return DEFAULT_JOIN_TIMEOUT
        what = f"{ENV_JOIN_TIMEOUT}={raw!r}"
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"{what}: give a number of seconds (or inf to wait forever).") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds; got {value!r}.")
    value = float(value)
    if math.isnan(value) or value <= 0:
        raise ValueError(f"{what} must be a positive number of seconds (math.inf waits forever); got {value!r}.")
    return value


def _split(address: str):
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"worker address {address!r} is not host:port")
    return host.strip("[]"), int(port)


def _left(deadline: float) -> float:
    return deadline - time.monotonic()


def join_workers(workers: Sequence[str], rank: int, timeout: float, who: str = "MultiWorkerTrainer") -> None:
    """Return when every rank of ``workers`` has joined; raise :class:`WorkerJoinError` naming
    the ranks that did not within ``timeout`` seconds (``math.inf``: no limit)."""
    if len(workers) < 2:
        return
    if rank == 0:
        _chief(list(workers), timeout, who)
    else:
        _member(list(workers), rank, timeout, who)


def _listing(workers: Sequence[str], ranks: Sequence[int]) -> str:
    return ", ".join(f"{r} ({workers[r]})" for r in ranks)


def _chief(workers: List[str], timeout: float, who: str) -> None:
    size = len(workers)
    host, port = _split(workers[0])
    srv = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as TF's server will bind it after us
    try:
        srv.bind(("", port))
    except OSError as e:
        srv.close()
        raise WorkerJoinError(f"{who}: rank 0 cannot listen at {workers[0]}, its own address in the cluster: "
                              f"{e.strerror}. Another process holds port {port}: stop it, or give the job other "
                              "ports.") from None
    srv.listen(max(16, size))
    srv.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(srv, selectors.EVENT_READ)
    joined: Dict[int, socket.socket] = {}
    partial: Dict[socket.socket, bytes] = {}
    problem: Optional[str] = None
    deadline = time.monotonic() + timeout
    try:
        while len(joined) < size - 1 and problem is None:
            wait = _left(deadline)
            if wait <= 0:
                break
            for key, _ in sel.select(timeout=None if math.isinf(wait) else min(wait, 1.0)):
                if key.fileobj is srv:
                    try:
                        conn, _ = srv.accept()
                    except OSError:
                        continue
                    conn.setblocking(False)
                    partial[conn] = b""
                    sel.register(conn, selectors.EVENT_READ)
                    continue
                conn = key.fileobj
                try:
                    data = conn.recv(_MAX_LINE)
                except OSError:
                    data = b""
                line = partial.get(conn, b"") + data
                if data and b"\n" not in line and len(line) < _MAX_LINE:
                    partial[conn] = line
                    continue
                sel.unregister(conn)
                partial.pop(conn, None)
                parts = line.split(b"\n", 1)[0].split()
                if len(parts) != 3 or parts[0] != _HELLO or not parts[1].isdigit() or not parts[2].isdigit():
                    conn.close()   # not one of ours (a port scan, a stray client): ignored
                    continue
                r, s = int(parts[1]), int(parts[2])
                if s != size or not 0 < r < size:
                    problem = (f"a worker joined as rank {r} of {s}, but rank 0's cluster has {size} workers "
                               f"({', '.join(workers)}): the ranks were started with different cluster "
                               "definitions (TF_CONFIG, --hosts).")
                elif r in joined:
                    problem = f"two processes joined as rank {r}: each rank must be started once."
                joined.setdefault(r, conn)
                if joined[r] is not conn:
                    _send(conn, b"ABORT " + problem.encode() + b"\n")
                    conn.close()
        srv.close()   # before GO: a rank's TF connects to this port next, and must meet TF's server
        if problem is None and len(joined) < size - 1:
            missing = [r for r in range(1, size) if r not in joined]
            problem = (f"rank 0 waited {timeout:g} s for the other workers to join; rank(s) "
                       f"{_listing(workers, missing)} never did: not started, stopped before creating {who}, or "
                       f"unable to reach rank 0 at {workers[0]}. Check their output; {who}(join_timeout=...) or "
                       f"{ENV_JOIN_TIMEOUT} sets how long to wait.")
        reply = b"GO\n" if problem is None else b"ABORT " + problem.encode() + b"\n"
        for conn in joined.values():
            _send(conn, reply)
        _await_close(list(joined.values()), time.monotonic() + 5)   # they close first: no TIME_WAIT here
    finally:
        srv.close()
        for conn in list(joined.values()) + list(partial):
            conn.close()
        sel.close()
    if problem is not None:
        raise WorkerJoinError(f"{who}: {problem}")


def _send(conn: socket.socket, data: bytes) -> None:
    try:
        conn.setblocking(True)
        conn.settimeout(5)
        conn.sendall(data)
    except OSError:
        pass   # that rank is gone: it learns nothing more from us


def _await_close(conns: List[socket.socket], deadline: float) -> None:
    for conn in conns:
        try:
            conn.settimeout(max(0.01, _left(deadline)))
            while conn.recv(_MAX_LINE):
                pass
        except OSError:
            pass


def _member(workers: List[str], rank: int, timeout: float, who: str) -> None:
    size = len(workers)
    host, port = _split(workers[0])
    deadline = time.monotonic() + timeout
    conn = None
    while conn is None:
        try:
            wait = _left(deadline)
            conn = socket.create_connection((host, port), timeout=5 if math.isinf(wait) else max(0.1, min(wait, 5)))
        except OSError as e:
            if _left(deadline) <= 0:
                raise WorkerJoinError(
                    f"{who}: rank {rank} waited {timeout:g} s for rank 0 (the chief, at {workers[0]}) and could not "
                    f"reach it ({getattr(e, 'strerror', None) or e}): it did not start, stopped before creating "
                    f"{who}, or its address cannot be reached from here. Check rank 0's output; "
                    f"{who}(join_timeout=...) or {ENV_JOIN_TIMEOUT} sets how long to wait.") from None
            time.sleep(_RETRY)
    try:
        conn.sendall(b"%s %d %d\n" % (_HELLO, rank, size))
        line = b""
        while not line.endswith(b"\n"):
            wait = _left(deadline) + _SLACK
            if wait <= 0:
                raise WorkerJoinError(
                    f"{who}: rank {rank} reached rank 0 at {workers[0]} but was not told to start within "
                    f"{timeout:g} s: rank 0 is still waiting for other ranks, or is not a {who}. Check rank 0's "
                    "output.")
            conn.settimeout(None if math.isinf(wait) else wait)
            try:
                data = conn.recv(4096)
            except socket.timeout:
                continue
            if not data:
                raise WorkerJoinError(
                    f"{who}: rank {rank}: rank 0 at {workers[0]} closed the connection before every worker "
                    "joined: it stopped (check its output), or the address is not rank 0's.")
            line += data
        if line.startswith(b"ABORT "):
            raise WorkerJoinError(f"{who}: rank {rank} cannot start: rank 0 says: "
                                  f"{line[6:].strip().decode(errors='replace')}")
        if line.strip() != b"GO":
            raise WorkerJoinError(f"{who}: rank {rank}: an unexpected answer from {workers[0]} ({line[:80]!r}): "
                                  "is that address rank 0 of this job?")
    finally:
        conn.close()
