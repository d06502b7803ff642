"""Stream a DataFlow to another process or machine over ZeroMQ.

``send_dataflow_zmq(df, addr)`` runs a DataFlow and PUSHes its datapoints to
``addr``; ``RemoteDataZMQ(addr)`` is a DataFlow that PULLs them. Datapoints travel
in the wire format of :mod:`.wire` (numpy arrays as raw frames).

Failure behaviour:

- the sender raises ``TimeoutError`` naming the address when no receiver has been
  connected for ``timeout`` seconds (at the start, or after the receiver went away);
  a connected receiver that is merely slow makes it wait, as a full queue should;
- the receiver skips a malformed message with a warning (``on_malformed='warn'``,
  the default: a stray or buggy sender must not take the training process down),
  or raises ``ValueError`` naming the address with ``on_malformed='raise'``. Any
  bytes at all count as one malformed message at worst (decoding never evaluates
  what it reads);
- messages are limited to ``max_message_bytes`` (default
  ``wire.DEFAULT_MAX_MESSAGE_BYTES``, 1 GiB) and ``max_message_frames`` (default
  ``wire.DEFAULT_MAX_MESSAGE_FRAMES``): ZeroMQ drops the connection of a peer that
  announces a larger *frame* before allocating it; the receiver reads a multipart
  message frame by frame and, once it is over either limit, keeps none of it: the
  rest of its frames are released one by one as they are read, never decoded, and
  the refusal is counted as malformed, naming the peer's address and the limit.
  ZeroMQ itself hands a message over only once all its frames have arrived, so a
  peer can still make the receiving process hold one message's frames for a moment:
  bind to 127.0.0.1 or an ``ipc://`` path when the peers are local (see
  docs/dataflow-parallel.md, "Security"). The sender refuses to send a datapoint over
  its own limits with a ``ValueError`` saying so, instead of being cut off silently.

Example::

    # on the data machine
    send_dataflow_zmq(BatchData(MyDataFlow(), 64), "tcp://trainer-host:8877")

    # in the training process
    ds = RemoteDataZMQ("tcp://0.0.0.0:8877")
    ds.reset_state()
    for dp in ds:
        ...
"""
from __future__ import annotations

import math
import numbers
import time
import weakref
from typing import Any, Iterator, List, Optional

import zmq
from zmq.utils.monitor import recv_monitor_message

from ..utils import logger
from ..utils.casting import whole_number
from ._workers import check_max_message_bytes
from .base import DataFlow, DataFlowReentrantGuard, check_dataflow
from .wire import (BUFFER_MAGIC, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_MESSAGE_FRAMES, HEADER_MAGIC,
                   check_message_size, dumps, dumps_frames, loads, loads_frames, message_nbytes)

__all__ = ["send_dataflow_zmq", "RemoteDataZMQ"]

_FORMATS = (None, "frames", "buffer")
_MAX_LINGER_S = 2_000_000   # under 2**31 ms
_DEFAULT_LINGER_S = 30.0    # a sender that waits for receivers forever still ends without hanging
_LOG_EVERY_S = 60.0


class _PeerCounter:
    """Counts the connected receivers of a socket from its monitor events."""

    def __init__(self, sock: zmq.Socket):
        self.mon = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
        self.peers = 0

    def update(self) -> int:
        while self.mon.poll(0):
            event = recv_monitor_message(self.mon)["event"]
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.peers += 1
            elif event == zmq.EVENT_DISCONNECTED:
                self.peers = max(0, self.peers - 1)
        return self.peers


def _send_or_wait(sock: zmq.Socket, frames: list, peers: _PeerCounter, addr: str, timeout: Optional[float]) -> None:
    try:
        sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
        return
    except zmq.Again:
        pass
    alone_since = None
    while True:
        if sock.poll(200, zmq.POLLOUT):
            try:
                sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
                return
            except zmq.Again:
                continue
        if peers.update() > 0:
            alone_since = None   # a receiver is there, just busy: keep waiting
            continue
        now = time.monotonic()
        alone_since = alone_since or now
        if timeout is not None and now - alone_since > timeout:
            raise TimeoutError(
                f"send_dataflow_zmq: no receiver connected to {addr} for {timeout:.0f} s. Start "
                f"RemoteDataZMQ (or another PULL socket) on that address, or check the address and port.")


def _check_max_bytes(value: Optional[int], who: str) -> Optional[int]:
    if value is None:
        return None
    return check_max_message_bytes(value, who)


def _check_max_frames(value: Optional[int], who: str) -> Optional[int]:
    if value is None:
        return None
    return whole_number(value, f"{who}(max_message_frames=...)", minimum=2)


def _check_timeout(value, who: str, allow_none: bool) -> Optional[float]:
    """A positive, finite number of seconds (or None where that means 'wait forever')."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
        # NaN never compares greater (the timeout never fires); a string fails only mid-iteration
        raise ValueError(f"{who}: timeout must be a positive, finite number of seconds"
                         + (" or None (wait forever)" if allow_none else "") + f", got {value!r}.")
    return float(value)


def send_dataflow_zmq(df, addr: str, hwm: int = 50, format: Optional[str] = None, bind: bool = False,
                      timeout: Optional[float] = None, num_epochs: Optional[int] = None,
                      max_message_bytes: Optional[int] = DEFAULT_MAX_MESSAGE_BYTES,
                      max_message_frames: Optional[int] = DEFAULT_MAX_MESSAGE_FRAMES) -> int:
    """Run ``df`` and send every datapoint to ``addr`` with a ZeroMQ PUSH socket.

    Args:
        df: the DataFlow; ``reset_state()`` is called here.
        addr: a ZeroMQ endpoint, e.g. ``"tcp://127.0.0.1:8877"`` or ``"ipc:///tmp/pipe"``.
        hwm: high-water mark: datapoints queued before sending blocks.
        format: ``None`` or ``"frames"`` (multipart, zero-copy; the default) or
            ``"buffer"`` (one frame per datapoint). :class:`RemoteDataZMQ` reads both.
        bind: bind ``addr`` instead of connecting to it.
        timeout: seconds without any connected receiver after which a ``TimeoutError``
            naming ``addr`` is raised; None (the default, tensorpack's behaviour) waits for
            receivers forever: a data server is started before its trainer, which connects once its
            graph is built, and it outlives a trainer to serve the next one.
        num_epochs: passes over ``df`` to send; None (tensorpack's behaviour) loops forever.
        max_message_bytes: the largest datapoint (encoded) to send; a larger one raises
            ``ValueError``. Keep it equal to the receiver's (None: no limit).
        max_message_frames: the most frames of one datapoint (the header and one per
            array over 1 KiB); more raises ``ValueError``. Keep it equal to the receiver's.

    Returns:
        the number of datapoints sent (only when ``num_epochs`` is given).

    Example::

        send_dataflow_zmq(MyDataFlow(), "tcp://127.0.0.1:8877", num_epochs=1)
    """
    if format not in _FORMATS:
        raise ValueError(f"send_dataflow_zmq: unknown format {format!r}; use None/'frames' (multipart) or "
                         "'buffer' (single frame). tensorpack's 'zmq_ops' format is not supported.")
    hwm = whole_number(hwm, "send_dataflow_zmq(hwm=...)", minimum=1)
    check_dataflow(df, "send_dataflow_zmq: df")
    max_bytes = _check_max_bytes(max_message_bytes, "send_dataflow_zmq")
    max_frames = _check_max_frames(max_message_frames, "send_dataflow_zmq")
    timeout = _check_timeout(timeout, "send_dataflow_zmq", allow_none=True)
    to_frames = (lambda dp: [dumps(dp)]) if format == "buffer" else dumps_frames

    def encode(dp):
        frames = to_frames(dp)
        if max_bytes is not None or max_frames is not None:
            check_message_size(message_nbytes(frames) if max_bytes is not None else 0, max_bytes,
                               f"send_dataflow_zmq to {addr}", len(frames), max_frames)
        return frames

    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.sndhwm = hwm
    sock.immediate = 1   # queue nothing for a receiver that is not connected yet
    # deliver what is queued at the end, but never hang on it (zmq's linger is an int of ms)
    sock.linger = int(min(timeout or _DEFAULT_LINGER_S, _MAX_LINGER_S) * 1000)
    peers = _PeerCounter(sock)
    try:
        try:
            (sock.bind if bind else sock.connect)(addr)
        except zmq.ZMQError as e:
            raise ValueError(f"send_dataflow_zmq: cannot {'bind' if bind else 'connect'} to {addr!r}: {e}") from None
        df.reset_state()
        logger.info("Sending datapoints to %s ...", addr)
        sent = 0
        last_log, last_sent = time.monotonic(), 0
        epochs = range(num_epochs) if num_epochs is not None else iter(int, 1)
        for _ in epochs:
            for dp in df:
                _send_or_wait(sock, encode(dp), peers, addr, timeout)
                sent += 1
                now = time.monotonic()
                if now - last_log > _LOG_EVERY_S:
                    logger.info("Sent %d datapoints to %s (%.1f/s)", sent, addr,
                                (sent - last_sent) / (now - last_log))
                    last_log, last_sent = now, sent
        return sent
    finally:
        # stop the events before closing their receiver: libzmq's I/O thread blocks sending an
        # event to a monitor socket whose peer is gone, and disable_monitor() then waits on it
        sock.disable_monitor()
        peers.mon.close(linger=0)
        sock.close()
        ctx.term()


def _release_sockets(sockets, ctx) -> None:
    for s in sockets:
        s.close(linger=0)
    ctx.term()


class RemoteDataZMQ(DataFlow):
    """A DataFlow of the datapoints PULLed from one or two ZeroMQ addresses.

    Args:
        addr1, addr2: endpoints, e.g. ``"tcp://0.0.0.0:8877"``; ``"tcp://127.0.0.1:*"``
            binds a free port (read it from ``self.addresses`` after ``reset_state()``).
        hwm: high-water mark of the receiving socket(s).
        bind: bind the addresses (default) or connect to them.
        timeout: raise ``TimeoutError`` when nothing arrives for this many seconds
            (None: wait forever, tensorpack's behaviour).
        on_malformed: ``'warn'`` (skip the message, log a warning, count it in
            ``num_malformed``) or ``'raise'`` (``ValueError``).
        max_message_bytes: the largest message accepted (default 1 GiB, see the module
            docstring); a peer announcing a larger frame is disconnected by ZeroMQ, a
            larger multipart message is refused (malformed). None: no limit.
        max_message_frames: the most frames of one message (default
            ``wire.DEFAULT_MAX_MESSAGE_FRAMES``); a message of more is refused (malformed).
            None: no limit.

    What is refused (counted in ``num_malformed``, and logged or raised with the peer's
    address and the reason): anything not in :mod:`.wire`'s format, msgpack extension
    types, nesting deeper than ``wire.MAX_NESTING``, and messages over the limits above.

    It iterates forever; ``len()`` is unknown.

    Example::

        ds = RemoteDataZMQ("tcp://127.0.0.1:*")
        ds.reset_state()
        print(ds.addresses)   # ['tcp://127.0.0.1:40123']
        for dp in ds:
            ...
    """

    def __init__(self, addr1: str, addr2: Optional[str] = None, hwm: int = 50, bind: bool = True,
                 timeout: Optional[float] = None, on_malformed: str = "warn",
                 max_message_bytes: Optional[int] = DEFAULT_MAX_MESSAGE_BYTES,
                 max_message_frames: Optional[int] = DEFAULT_MAX_MESSAGE_FRAMES):
        if on_malformed not in ("warn", "raise"):
            raise ValueError(f"RemoteDataZMQ: on_malformed must be 'warn' or 'raise', got {on_malformed!r}")
        hwm = whole_number(hwm, "RemoteDataZMQ(hwm=...)", minimum=1)
        self._addrs = [a for a in (addr1, addr2) if a]
        self.hwm = hwm
        self.bind = bool(bind)
        self.timeout = _check_timeout(timeout, "RemoteDataZMQ", allow_none=True)
        self.on_malformed = on_malformed
        self.max_message_bytes = _check_max_bytes(max_message_bytes, "RemoteDataZMQ")
        self.max_message_frames = _check_max_frames(max_message_frames, "RemoteDataZMQ")
        self.num_malformed = 0
        self.addresses: List[str] = []
        self._sockets: List[zmq.Socket] = []
        self._guard = DataFlowReentrantGuard("RemoteDataZMQ")
        self._finalizer = None

    def reset_state(self) -> None:
        if self._finalizer is not None:
            raise RuntimeError("reset_state() was already called on this RemoteDataZMQ; call it once.")
        ctx = zmq.Context()
        self._finalizer = weakref.finalize(self, _release_sockets, self._sockets, ctx)
        for addr in self._addrs:
            sock = ctx.socket(zmq.PULL)
            sock.rcvhwm = self.hwm
            if self.max_message_bytes is not None:
                sock.maxmsgsize = self.max_message_bytes  # refused before zmq allocates it
            self._sockets.append(sock)
            try:
                (sock.bind if self.bind else sock.connect)(addr)
            except zmq.ZMQError as e:
                raise ValueError(f"RemoteDataZMQ: cannot {'bind' if self.bind else 'connect'} to {addr!r}: {e}. "
                                 "Is another process using that port?") from None
            self.addresses.append(sock.last_endpoint.decode() if self.bind else addr)
        self._poller = zmq.Poller()
        for s in self._sockets:
            self._poller.register(s, zmq.POLLIN)

    def close(self) -> None:
        """Close the sockets; safe to call more than once."""
        if self._finalizer is not None:
            self._finalizer()

    def _recv_bounded(self, sock: zmq.Socket):
        """One message, read frame by frame: ``(frames, None, peer)``, or ``(None, reason, peer)``
        when it is over the limits, its frames past the limit dropped as they are read (never held
        together). ``peer``: the sender's IP address where ZeroMQ knows it."""
        max_frames, max_bytes = self.max_message_frames, self.max_message_bytes
        frames, nbytes, peer = [], 0, None
        while True:
            f = sock.recv(copy=False)
            if peer is None:
                peer = _peer_address(f)
            nbytes += len(f)
            frames.append(f)
            if not f.more:
                return frames, None, peer
            if max_frames is not None and len(frames) >= max_frames:
                over = f"more than {max_frames} frames (max_message_frames)"
                break
            if max_bytes is not None and nbytes > max_bytes:
                over = f"more than {max_bytes} bytes (max_message_bytes)"
                break
        nframes = len(frames)
        del frames, f  # release what was read; the rest is dropped frame by frame
        sink, more = bytearray(), True
        while more:
            nbytes += sock.recv_into(sink)  # discards the frame (no copy, no Frame object); its full size
            nframes += 1
            more = sock.rcvmore
        return None, (f"a message of {over}: refused, none of it kept or decoded (it had {nframes} frames, "
                      f"{nbytes} bytes)"), peer

    def _refuse(self, reason: str, sock_index: int, peer: Optional[str]):
        where = self.addresses[sock_index] + (f" from {peer}" if peer else "")
        if self.on_malformed == "raise":
            raise ValueError(f"RemoteDataZMQ: malformed message received on {where}: {reason}")
        self.num_malformed += 1
        n = self.num_malformed
        if n <= 5 or n % 1000 == 0:
            logger.warning("RemoteDataZMQ: skipped malformed message #%d received on %s: %s", n, where, reason)
        return _SKIP

    def _decode(self, frames, sock_index: int, peer: Optional[str] = None):
        try:
            first = frames[0].buffer
            if bytes(first[:4]) == HEADER_MAGIC:
                return loads_frames(frames, max_bytes=self.max_message_bytes, max_frames=self.max_message_frames)
            if len(frames) == 1 and bytes(first[:4]) == BUFFER_MAGIC:
                return loads(first, max_bytes=self.max_message_bytes)
            raise ValueError(f"a message of {len(frames)} frame(s) that is not in kerastrainer's wire format "
                             f"(starts with {bytes(first[:8])!r})")
        except Exception as e:  # noqa: BLE001 -- whatever a peer sends must not end training
            if not isinstance(e, ValueError):
                e = ValueError(f"{type(e).__name__}: {e}")
            return self._refuse(str(e), sock_index, peer)

    def _receive(self, sock: zmq.Socket, sock_index: int):
        frames, refused, peer = self._recv_bounded(sock)
        if refused is not None:
            return self._refuse(refused, sock_index, peer)
        return self._decode(frames, sock_index, peer)

    def __iter__(self) -> Iterator[Any]:
        if self._finalizer is None:
            raise RuntimeError("Call reset_state() on this RemoteDataZMQ before iterating it.")
        if not self._finalizer.alive:
            raise RuntimeError("This RemoteDataZMQ is closed; create a new one.")
        with self._guard:
            last = time.monotonic()
            while True:
                events = dict(self._poller.poll(1000))
                got = False
                for i, s in enumerate(self._sockets):
                    if s in events:
                        dp = self._receive(s, i)
                        got = True
                        if dp is not _SKIP:
                            yield dp
                if got:
                    last = time.monotonic()
                elif self.timeout is not None and time.monotonic() - last > self.timeout:
                    raise TimeoutError(f"RemoteDataZMQ: nothing arrived on {', '.join(self.addresses)} "
                                       f"for {self.timeout} s. Is the sender running and pointed at it?")


_SKIP = object()


def _peer_address(frame) -> Optional[str]:
    """The sending peer's IP address (tcp), for the log; None where ZeroMQ does not know it."""
    try:
        return frame.get("Peer-Address") or None
    except (zmq.ZMQError, AttributeError, TypeError, UnicodeDecodeError):
        return None
