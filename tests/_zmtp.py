"""A raw ZMTP 3.0 peer over a plain TCP socket, for sending what no zmq socket would send."""
import socket
import struct


def _greeting() -> bytes:
    return b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\0") + b"\0" + b"\0" * 31


def _ready(socket_type: bytes) -> bytes:
    body = b"\x05READY" + bytes([11]) + b"Socket-Type" + struct.pack(">I", len(socket_type)) + socket_type
    return b"\x04" + bytes([len(body)]) + body


def connect_push(endpoint: str, socket_type: bytes = b"PUSH", timeout: float = 10.0) -> socket.socket:
    """A connection to a zmq ``tcp://host:port`` or ``ipc://`` endpoint (``ipc://@name``: Linux
    abstract namespace) that has done the ZMTP handshake as a ``socket_type`` socket."""
    if endpoint.startswith("tcp://"):
        host, port = endpoint[len("tcp://"):].rsplit(":", 1)
        s = socket.create_connection((host, int(port)), timeout=timeout)
    elif endpoint.startswith("ipc://"):
        path = endpoint[len("ipc://"):]
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect("\0" + path[1:] if path.startswith("@") else path)
    else:
        raise ValueError(f"unsupported endpoint {endpoint!r}")
    s.sendall(_greeting())
    got = b""
    while len(got) < 64:
        chunk = s.recv(64 - len(got))
        if not chunk:
            raise ConnectionError("peer closed during the ZMTP greeting")
        got += chunk
    s.sendall(_ready(socket_type))
    return s


def long_frame_header(size: int, more: bool = False) -> bytes:
    """The header of a message frame claiming ``size`` bytes (the body is up to the caller)."""
    return bytes([0x02 | (0x01 if more else 0)]) + struct.pack(">Q", size)


def closed_by_peer(s: socket.socket, timeout: float = 10.0) -> bool:
    """True when the peer closes the connection within ``timeout`` seconds."""
    s.settimeout(timeout)
    try:
        while True:
            data = s.recv(4096)
            if not data:
                return True
    except (socket.timeout, TimeoutError):
        return False
    except ConnectionResetError:
        return True
