"""The shared-memory batch transport of :class:`~kerastrainer.dataflow.parallel.MultiProcessRunnerZMQ`.

Owns: the slots through which the large arrays of a datapoint skip the ZeroMQ socket
(Linux memfds), the worker's side (:class:`ShmWriter`: fills a slot and returns the
small message to send instead of the arrays), the consumer's side (:class:`ShmReader`:
maps the slots and builds the arrays on them without copying), the socketpair that
carries the memfds and the acknowledgements (:func:`slot_channel`), and
:func:`shm_supported`.

Leaves to others: the socket itself, the workers and their failures to :mod:`._workers`
and :mod:`.parallel`; the encoding of the datapoint's header and small parts to
:mod:`.wire`.

How it works: a worker copies the large arrays of a datapoint into a "slot" (a memfd
mapped by both processes) and sends only the header over zmq. The memfd travels once
per slot over a UNIX datagram socketpair (SCM_RIGHTS). The consumer builds its arrays
on the mapping and reports back on that socketpair when it has received a slot ('R')
and when the last array using it is garbage collected ('F'). When every slot is held
by the consumer (it keeps the arrays), the worker falls back to sending frames.
memfds are anonymous: nothing is left behind, whoever is killed.
"""
from __future__ import annotations

import ctypes
import mmap
import os
import select
import socket
import struct
import weakref
from typing import Optional

from ._workers import DataFlowWorkerError
from .wire import dumps_frames, loads_frames

SHM_MARKER = b"KTS1"
SHM_MIN_BYTES = 1 << 20       # datapoints with fewer array bytes go through zmq frames
SHM_MAX_SLOTS = 16            # per worker
_SHM_HDR = struct.Struct("<IIIH")   # worker, slot, generation, number of arrays
_SHM_BUF = struct.Struct("<QQ")     # offset, size
_SHM_FD = struct.Struct("<III")     # slot, generation, capacity
_SHM_ACK = struct.Struct("<cI")     # b'R' received / b'F' freed, slot


def shm_supported() -> bool:
    return hasattr(os, "memfd_create") and hasattr(socket, "send_fds")


class ShmWriter:
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


def slot_channel() -> tuple:
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


class ShmReader:
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
