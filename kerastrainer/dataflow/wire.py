"""The msgpack wire format of datapoints: numpy arrays travel as raw buffers.

Two forms share one encoding:

- ``dumps_frames(obj) -> list`` / ``loads_frames(frames)``: a small msgpack
  *header* frame, then one raw buffer per large numpy array. Send it with
  ``socket.send_multipart(frames, copy=False)`` and receive it with
  ``recv_multipart(copy=False)``: arrays are never pickled, never copied on send
  (beyond making a non-contiguous array contiguous once), and built on receive with
  ``np.frombuffer`` over the zmq frames' own memory.
- ``dumps(obj) -> bytes`` / ``loads(buf)``: the same header and buffers laid out
  in one contiguous buffer (for LMDB, files, single-frame transports). Arrays
  returned by ``loads`` are views into ``buf`` (read-only when ``buf`` is bytes).

What round-trips exactly: numpy arrays of any non-object dtype (bool, structured,
datetime... any shape, 0-d included, C- or non-contiguous), numpy scalars (they
stay numpy scalars of the same dtype), bytes, str, int, float, bool, None, and
nested lists / tuples / dicts of them. **Tuples come back as lists** (msgpack has
one sequence type); dict subclasses come back as dicts; bytearray and memoryview
come back as bytes. Arrays smaller than 1 KiB are copied into the header and come
back writable; larger arrays received by ``loads_frames`` are writable views of the
zmq frame.

A buffer or frame list that is not in this format raises ``ValueError``, whatever
its bytes (decoding never evaluates anything: dtype strings are checked against
numpy's type codes before numpy sees them, and object dtypes are refused). Only the
types above are data: msgpack's own extension types (its ``Timestamp``, or any
extension code but this format's three) are refused, and so is nesting deeper than
msgpack's decoder allows (``MAX_NESTING``), each with a message saying so.
``loads_frames``/``loads`` take ``max_bytes`` to refuse larger messages, and
``loads_frames`` takes ``max_frames``; ``DEFAULT_MAX_MESSAGE_BYTES`` (1 GiB) is the
limit the sockets of :mod:`.remote`, :mod:`.parallel` and :mod:`.parallel_map` use by
default, ``DEFAULT_MAX_MESSAGE_FRAMES`` the frame limit of :mod:`.remote`'s receiver.

Example::

    frames = dumps_frames([np.zeros((64, 224, 224, 3), np.uint8), 3])
    sock.send_multipart(frames, copy=False)
    ...
    img, label = loads_frames(sock.recv_multipart(copy=False))
"""
from __future__ import annotations

import re
import struct
from typing import Any, List, Optional, Sequence

import msgpack
import numpy as np

__all__ = ["dumps", "loads", "dumps_frames", "loads_frames", "is_wire_header", "message_nbytes",
           "check_message_size", "HEADER_MAGIC", "BUFFER_MAGIC", "DEFAULT_MAX_MESSAGE_BYTES",
           "DEFAULT_MAX_MESSAGE_FRAMES", "MAX_NESTING"]

HEADER_MAGIC = b"KTW1"   # first bytes of a header frame
BUFFER_MAGIC = b"KTB1"   # first bytes of a single-buffer message
INLINE_MAX_BYTES = 1024  # arrays up to this size travel inside the header
_ALIGN = 64              # offsets of arrays in a single buffer (cache-line aligned)
# The largest message a socket accepts unless told otherwise: 1 GiB is ~7 batches of
# 256 float32 224x224x3 images (154 MB each); a claim beyond it is refused before zmq
# allocates it. Raise it with the sockets' max_message_bytes argument.
DEFAULT_MAX_MESSAGE_BYTES = 1 << 30
# The most frames a receiver keeps of one message: the header and one frame per array over
# INLINE_MAX_BYTES. A datapoint with more arrays than this is unusual; a message with more
# frames is a frame-count bomb (each frame costs a Python object). Raise it with
# max_message_frames on both ends.
DEFAULT_MAX_MESSAGE_FRAMES = 10_000
# msgpack's C decoder refuses deeper nesting (its stack); its encoder refuses it as well
MAX_NESTING = 1024
_MAX_NDIM = 64
_MAX_DTYPE_DEPTH = 16
# what numpy's dtype.str looks like: byte order, a non-object kind, item size, datetime unit
_TYPESTR = re.compile(r"[<>|=]?[?bBhHiIlLqQpPefdgFDGuifcbSUVmM][0-9]{0,9}(\[[0-9]{0,9}[a-zA-Z]{1,2}\])?")

_EXT_INLINE_ARRAY = 1    # payload: msgpack [dtype, shape, raw bytes]
_EXT_FRAME_ARRAY = 2     # payload: msgpack [dtype, shape, frame index]
_EXT_SCALAR = 3          # payload: msgpack [dtype, raw bytes]

_BUF_PREFIX = struct.Struct("<4sII")  # magic, header length, number of array buffers
_U64 = struct.Struct("<Q")


def _dtype_to_wire(dt: np.dtype):
    if dt.hasobject:
        raise TypeError(
            f"Cannot serialize a numpy array of dtype {dt} (it holds Python objects). "
            "Convert it to a numeric/bytes dtype, or to a list, before yielding it from a DataFlow.")
    if dt.fields is None and dt.subdtype is None:
        return dt.str
    return np.lib.format.dtype_to_descr(dt)


def _tuplify(descr):
    # msgpack turns the tuples of a structured dtype's descr into lists
    if isinstance(descr, list):
        return [tuple(_tuplify(x) for x in item) if isinstance(item, list) else item for item in descr]
    return descr


def _check_descr(d, depth: int = 0) -> None:
    """Refuse anything but the descr shapes ``_dtype_to_wire`` writes (no parsing by numpy yet)."""
    if depth > _MAX_DTYPE_DEPTH:
        raise ValueError("dtype nested too deeply")
    if isinstance(d, str):
        if len(d) > 32 or not _TYPESTR.fullmatch(d):
            raise ValueError(f"invalid dtype {d[:40]!r}")
        return
    if not isinstance(d, list) or not d or len(d) > 4096:
        raise ValueError("invalid dtype description")
    for field in d:
        if not isinstance(field, list) or len(field) not in (2, 3):
            raise ValueError("invalid field in a dtype description")
        name = field[0]
        if not (isinstance(name, str) or (isinstance(name, list) and len(name) == 2
                                           and all(isinstance(x, str) for x in name))):
            raise ValueError("invalid field name in a dtype description")
        _check_descr(field[1], depth + 1)
        if len(field) == 3:
            _check_shape(field[2])


def _check_shape(shape) -> int:
    """The number of elements of a wire shape (list of non-negative ints); ValueError otherwise."""
    if not isinstance(shape, list) or len(shape) > _MAX_NDIM:
        raise ValueError(f"invalid array shape {str(shape)[:60]}")
    count = 1
    for dim in shape:
        if type(dim) is not int or dim < 0:
            raise ValueError(f"invalid array shape {str(shape)[:60]}")
        count *= dim
    return count


_DTYPES: dict = {}   # checked plain dtype strings -> dtype: every array of every message pays the check


def _dtype_from_wire(d) -> np.dtype:
    if type(d) is str:
        dt = _DTYPES.get(d)
        if dt is not None:
            return dt
    _check_descr(d)
    dt = np.dtype(d) if isinstance(d, str) else np.lib.format.descr_to_dtype(_tuplify(d))
    if dt.hasobject:
        raise ValueError("object dtype in a wire header")
    if type(d) is str and len(_DTYPES) < 1024:   # bounded: a hostile peer's variety cannot grow it
        _DTYPES[d] = dt
    return dt


class _Encoder:
    """Packs one object; large arrays go to ``self.buffers`` (contiguous, uncopied)."""

    def __init__(self):
        self.buffers: List[Any] = []
        self._packer = msgpack.Packer(use_bin_type=True, strict_types=True, default=self._default)

    def _default(self, obj):
        if isinstance(obj, np.ndarray):
            return self._array(obj)
        if isinstance(obj, np.generic):
            dt = obj.dtype
            return msgpack.ExtType(_EXT_SCALAR, msgpack.packb(
                [_dtype_to_wire(dt), np.asarray(obj).tobytes()], use_bin_type=True))
        # strict_types sends subclasses of the base types here
        if isinstance(obj, (tuple, list)):
            return list(obj)
        if isinstance(obj, dict):
            return dict(obj)
        if isinstance(obj, bool):
            return bool(obj)
        if isinstance(obj, int):
            return int(obj)
        if isinstance(obj, float):
            return float(obj)
        if isinstance(obj, str):
            return str(obj)
        if isinstance(obj, (bytes, bytearray, memoryview)):
            return bytes(obj)
        raise TypeError(
            f"Cannot serialize an object of type {type(obj).__module__}.{type(obj).__qualname__}: "
            "datapoints may hold numpy arrays and scalars, bytes, str, int, float, bool, None, "
            "and lists/tuples/dicts of them.")

    def _array(self, arr: np.ndarray):
        dtw = _dtype_to_wire(arr.dtype)
        if arr.nbytes <= INLINE_MAX_BYTES:
            return msgpack.ExtType(_EXT_INLINE_ARRAY, msgpack.packb(
                [dtw, list(arr.shape), arr.tobytes()], use_bin_type=True))
        if not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr)  # the one copy a strided array costs
        self.buffers.append(arr)
        return msgpack.ExtType(_EXT_FRAME_ARRAY, msgpack.packb(
            [dtw, list(arr.shape), len(self.buffers) - 1], use_bin_type=True))

    def header(self, obj) -> bytes:
        return HEADER_MAGIC + self._packer.pack(obj)


def _raw_view(arr: np.ndarray) -> memoryview:
    """A flat byte view of a C-contiguous array, for zmq and joins (works for any dtype)."""
    return memoryview(arr.reshape(-1).view(np.uint8)) if arr.size else memoryview(b"")


def dumps_frames(obj: Any) -> list:
    """Encode ``obj`` as ``[header, buf0, buf1, ...]``; send with ``send_multipart(copy=False)``.

    The buffers are memoryviews of the arrays themselves: do not modify the arrays
    until zmq has sent them.
    """
    enc = _Encoder()
    header = enc.header(obj)
    return [header] + [_raw_view(a) for a in enc.buffers]


def _frame_bytes(frame) -> memoryview:
    # zmq.Frame exposes .buffer; bytes/bytearray/memoryview are buffers already
    buf = getattr(frame, "buffer", frame)
    try:
        return memoryview(buf)
    except TypeError:
        raise ValueError(f"Malformed wire message: a frame of type {type(frame).__name__} is not a buffer") from None


def _decode(header: memoryview, buffers: Sequence[memoryview], where: str):
    if header[:len(HEADER_MAGIC)] != HEADER_MAGIC:
        raise ValueError(
            f"Malformed wire message ({where}): the header does not start with {HEADER_MAGIC!r}; "
            "was it written by kerastrainer.dataflow.wire.dumps/dumps_frames?")
    used = set()

    def ext_hook(code, data):
        if code == _EXT_FRAME_ARRAY:
            dtw, shape, idx = msgpack.unpackb(data, raw=False)
            dt = _dtype_from_wire(dtw)
            if type(idx) is not int or not 0 <= idx < len(buffers):
                raise ValueError(f"array frame index {idx!r} out of range (message has {len(buffers)})")
            buf = buffers[idx]
            count = _check_shape(shape)
            if count * dt.itemsize != buf.nbytes:
                raise ValueError(f"array frame {idx} has {buf.nbytes} bytes, expected {count * dt.itemsize} "
                                 f"for shape {tuple(shape)} and dtype {dt}")
            used.add(idx)
            return np.ndarray(shape, dt, buf)   # a view of the frame (frombuffer + reshape: 2x the time)
        if code == _EXT_INLINE_ARRAY:
            dtw, shape, raw = msgpack.unpackb(data, raw=False)
            dt = _dtype_from_wire(dtw)
            count = _check_shape(shape)
            if not isinstance(raw, bytes) or count * dt.itemsize != len(raw):
                raise ValueError(f"inline array of shape {tuple(shape)} and dtype {dt} has the wrong size")
            return np.frombuffer(raw, dtype=dt, count=count).reshape(shape).copy()
        if code == _EXT_SCALAR:
            dtw, raw = msgpack.unpackb(data, raw=False)
            dt = _dtype_from_wire(dtw)
            if not isinstance(raw, bytes) or len(raw) != dt.itemsize:
                raise ValueError(f"scalar of dtype {dt} has {len(raw)} bytes, expected {dt.itemsize}")
            return np.frombuffer(raw, dtype=dt)[0]
        raise ValueError(f"msgpack extension type {code} is not part of kerastrainer's wire format "
                         "(only its arrays and numpy scalars are)")

    body = header[len(HEADER_MAGIC):]
    try:
        obj = msgpack.unpackb(body, raw=False, ext_hook=ext_hook, strict_map_key=False, use_list=True)
        if _may_hold_timestamp(body):
            _check_types(obj)
    except msgpack.StackError:
        raise ValueError(f"Malformed wire message ({where}): nested deeper than {MAX_NESTING} levels "
                         "(msgpack's limit); not a datapoint, perhaps a recursion bomb") from None
    except Exception as e:  # noqa: BLE001 -- any bytes at all must end here, as a ValueError
        detail = f"{type(e).__name__}: {e}" if not isinstance(e, ValueError) else (str(e) or "ValueError")
        raise ValueError(f"Malformed wire message ({where}): {detail}") from None
    if len(used) != len(buffers):
        raise ValueError(f"Malformed wire message ({where}): {len(buffers)} array frames but the header "
                         f"refers to {len(used)}")
    return obj


# msgpack decodes its extension type -1 (Timestamp) itself, without calling ext_hook; its
# encodings are fixext 4/8 and ext 8 of 12 bytes, all followed by the type byte 0xff
_TIMESTAMP_MARK = re.compile(b"[\xd6\xd7]\xff|\xc7\x0c\xff")
_DATA_TYPES = (type(None), bool, int, float, str, bytes, np.ndarray, np.generic)


def _may_hold_timestamp(body: memoryview) -> bool:
    # one C-speed scan, no copy; raw bytes can match by chance, then _check_types looks properly
    return _TIMESTAMP_MARK.search(body) is not None


def _check_types(obj) -> None:
    """Refuse any decoded value that is not of the wire format's types (iteratively: no recursion)."""
    stack = [obj]
    while stack:
        x = stack.pop()
        if isinstance(x, list):
            stack.extend(x)
        elif isinstance(x, dict):
            stack.extend(x.keys())
            stack.extend(x.values())
        elif not isinstance(x, _DATA_TYPES):
            raise ValueError(f"a value of type {type(x).__module__}.{type(x).__qualname__} ({str(x)[:60]}) is "
                             "not part of kerastrainer's wire format (msgpack extension types are refused)")


def message_nbytes(frames: Sequence[Any]) -> int:
    """The total size in bytes of a list of frames (bytes, memoryviews, zmq Frames)."""
    total = 0
    for f in frames:
        total += _frame_bytes(f).nbytes
    return total


def check_message_size(nbytes: int, max_bytes: Optional[int], who: str, nframes: Optional[int] = None,
                       max_frames: Optional[int] = None) -> None:
    """For senders: raise ``ValueError`` if a message is over the receiver's limits.

    The receiving socket drops the connection of a peer that sends a larger frame, and
    refuses a message of more bytes or frames, so the sender must fail first, saying
    how to raise the limit.
    """
    if max_bytes is not None and nbytes > max_bytes:
        raise ValueError(
            f"{who}: a datapoint of {nbytes} bytes is larger than max_message_bytes={max_bytes}. Send "
            f"smaller datapoints (smaller batches), or raise max_message_bytes on both ends.")
    if max_frames is not None and nframes is not None and nframes > max_frames:
        raise ValueError(
            f"{who}: a datapoint with {nframes - 1} arrays over {INLINE_MAX_BYTES} bytes takes {nframes} frames, "
            f"more than max_message_frames={max_frames}. Stack the arrays into fewer, or raise "
            "max_message_frames on both ends.")


def loads_frames(frames: Sequence[Any], max_bytes: Optional[int] = None, max_frames: Optional[int] = None) -> Any:
    """Decode frames made by :func:`dumps_frames` (zmq Frames, bytes or memoryviews).

    Arrays are ``np.frombuffer`` views over the frames: no copy. With ``max_bytes``,
    a message whose frames hold more bytes than that raises ``ValueError``; with
    ``max_frames``, one of more frames than that.
    """
    if not frames:
        raise ValueError("Malformed wire message: no frames")
    if max_frames is not None and len(frames) > max_frames:
        raise ValueError(f"Malformed wire message (multipart): {len(frames)} frames is over the limit of "
                         f"{max_frames} (max_message_frames)")
    views = [_frame_bytes(f) for f in frames]
    if max_bytes is not None:
        total = sum(v.nbytes for v in views)
        if total > max_bytes:
            raise ValueError(f"Malformed wire message (multipart): {total} bytes is over the limit of "
                             f"{max_bytes} (max_message_bytes)")
    return _decode(views[0], views[1:], "multipart")


def dumps(obj: Any) -> bytes:
    """Encode ``obj`` into one contiguous ``bytes`` (see the module docstring for the layout)."""
    enc = _Encoder()
    header = enc.header(obj)
    parts = [_BUF_PREFIX.pack(BUFFER_MAGIC, len(header), len(enc.buffers))]
    parts += [_U64.pack(a.nbytes) for a in enc.buffers]
    parts.append(header)
    pos = sum(len(p) for p in parts)
    for a in enc.buffers:
        pad = -pos % _ALIGN
        parts.append(b"\0" * pad)
        parts.append(_raw_view(a))
        pos += pad + a.nbytes
    return b"".join(parts)


def loads(buf: Any, max_bytes: Optional[int] = None) -> Any:
    """Decode a buffer made by :func:`dumps`; arrays are views into ``buf`` (no copy).

    With ``max_bytes``, a larger buffer raises ``ValueError``.
    """
    mv = _frame_bytes(buf)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    n = len(mv)
    if max_bytes is not None and n > max_bytes:
        raise ValueError(f"Malformed wire buffer: {n} bytes is over the limit of {max_bytes} (max_message_bytes)")
    if n < _BUF_PREFIX.size:
        raise ValueError(f"Malformed wire buffer: {n} bytes, too short (was it written by "
                         "kerastrainer.dataflow.wire.dumps?)")
    magic, hlen, nbuf = _BUF_PREFIX.unpack_from(mv, 0)
    if magic != BUFFER_MAGIC:
        raise ValueError(
            f"Malformed wire buffer: it does not start with {BUFFER_MAGIC!r} (got {bytes(mv[:8])!r}); "
            "was it written by kerastrainer.dataflow.wire.dumps?")
    pos = _BUF_PREFIX.size
    if pos + nbuf * _U64.size + hlen > n:
        raise ValueError(f"Malformed wire buffer: truncated ({n} bytes, header says more)")
    sizes = struct.unpack_from(f"<{nbuf}Q", mv, pos) if nbuf else ()
    pos += nbuf * _U64.size
    header = mv[pos:pos + hlen]
    pos += hlen
    buffers = []
    for size in sizes:
        pos += -pos % _ALIGN
        if pos + size > n:
            raise ValueError(f"Malformed wire buffer: truncated ({n} bytes, an array needs {pos + size})")
        buffers.append(mv[pos:pos + size])
        pos += size
    return _decode(header, buffers, "buffer")


def is_wire_header(frame: Any) -> bool:
    """True when ``frame`` starts like a :func:`dumps_frames` header."""
    try:
        mv = _frame_bytes(frame)
    except ValueError:
        return False
    return bytes(mv[:len(HEADER_MAGIC)]) == HEADER_MAGIC
