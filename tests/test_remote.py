"""Streaming a DataFlow over tcp between real processes; bad input never crashes the receiver."""
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import zmq

from kerastrainer.dataflow import wire
from kerastrainer.dataflow.base import DataFlow
from kerastrainer.dataflow.remote import RemoteDataZMQ, send_dataflow_zmq

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _zmtp  # noqa: E402

SENDER = textwrap.dedent("""
    import sys
    import numpy as np
    sys.path.insert(0, {repo!r})
    from kerastrainer.dataflow.base import DataFlow
    from kerastrainer.dataflow.remote import send_dataflow_zmq

    class Images(DataFlow):
        def __iter__(self):
            for i in range(6):
                yield {{"img": np.full((16, 32, 32, 3), i, np.uint8), "label": np.int64(i), "name": f"n{{i}}"}}

    n = send_dataflow_zmq(Images(), sys.argv[1], format=None if sys.argv[2] == "frames" else sys.argv[2],
                          num_epochs=2, timeout=20)
    print("SENT", n, flush=True)
""")


class Counter(DataFlow):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        for i in range(self.n):
            yield [np.arange(i, i + 300), i]


def receive(ds, n):
    it = iter(ds)
    return [next(it) for _ in range(n)]


@pytest.fixture
def receiver():
    ds = RemoteDataZMQ("tcp://127.0.0.1:*", timeout=30)
    ds.reset_state()
    yield ds
    ds.close()


@pytest.mark.parametrize("fmt", ["frames", "buffer"])
def test_dataflow_from_another_process_over_tcp(receiver, fmt):
    addr = receiver.addresses[0]
    assert addr.startswith("tcp://127.0.0.1:") and not addr.endswith("*")
    sender = subprocess.Popen([sys.executable, "-c", SENDER.format(repo=REPO), addr, fmt],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        got = receive(receiver, 12)
        out, err = sender.communicate(timeout=30)
        assert sender.returncode == 0, err
        assert "SENT 12" in out
    finally:
        if sender.poll() is None:
            sender.kill()
            sender.wait(5)
    assert [d["label"] for d in got] == list(range(6)) * 2
    for d in got:
        i = int(d["label"])
        assert type(d["label"]) is np.int64
        assert d["img"].shape == (16, 32, 32, 3) and d["img"].dtype == np.uint8 and (d["img"] == i).all()
        assert d["name"] == f"n{i}"


def test_garbage_is_skipped_with_a_warning(receiver, caplog):
    ctx = zmq.Context()
    raw = ctx.socket(zmq.PUSH)
    try:
        raw.connect(receiver.addresses[0])
        raw.send(b"garbage bytes")
        raw.send_multipart([wire.HEADER_MAGIC + b"\xc1", b"x"])
        raw.send_multipart([b"a", b"b", b"c"])
        raw.send_multipart(wire.dumps_frames([np.arange(5000), "good"]), copy=False)
        arr, tag = receive(receiver, 1)[0]
    finally:
        raw.close(linger=1000)
        ctx.term()
    assert tag == "good" and (arr == np.arange(5000)).all()
    assert receiver.num_malformed == 3


def _hostile_dtype_header():
    import msgpack
    inner = msgpack.packb(["i4,(", [1], b"\0" * 4], use_bin_type=True)   # numpy: SyntaxError
    return wire.HEADER_MAGIC + msgpack.packb(msgpack.ExtType(1, inner), use_bin_type=True)


def test_any_bytes_are_one_malformed_message_at_worst(receiver):
    ctx = zmq.Context()
    raw = ctx.socket(zmq.PUSH)
    try:
        raw.connect(receiver.addresses[0])
        raw.send(_hostile_dtype_header())
        raw.send(os.urandom(100))
        raw.send(wire.BUFFER_MAGIC + os.urandom(96))
        raw.send_multipart(wire.dumps_frames(["good"]))
        assert receive(receiver, 1)[0] == ["good"]
    finally:
        raw.close(linger=1000)
        ctx.term()
    assert receiver.num_malformed == 3


def test_huge_frame_claim_is_refused_before_buffering(receiver):
    peer = _zmtp.connect_push(receiver.addresses[0])
    try:
        peer.sendall(_zmtp.long_frame_header(2 << 30) + b"x" * 4096)   # claims 2 GiB
        assert _zmtp.closed_by_peer(peer, timeout=20), "the receiver kept a 2 GiB frame open"
    finally:
        peer.close()
    ctx = zmq.Context()
    good = ctx.socket(zmq.PUSH)
    try:
        good.connect(receiver.addresses[0])
        good.send_multipart(wire.dumps_frames(["still here"]))
        assert receive(receiver, 1)[0] == ["still here"]
    finally:
        good.close(linger=1000)
        ctx.term()


def test_message_size_limit_is_configurable_and_checked_by_the_sender():
    ds = RemoteDataZMQ("tcp://127.0.0.1:*", timeout=30, max_message_bytes=64 << 10)
    ds.reset_state()
    try:
        class Big(DataFlow):
            def __iter__(self):
                yield [np.zeros(100 << 10, np.uint8)]
        with pytest.raises(ValueError, match="max_message_bytes"):
            send_dataflow_zmq(Big(), ds.addresses[0], num_epochs=1, timeout=5, max_message_bytes=64 << 10)
        ctx = zmq.Context()
        raw = ctx.socket(zmq.PUSH)
        try:
            raw.connect(ds.addresses[0])
            # two frames under the limit each, over it together: malformed, skipped
            raw.send_multipart(wire.dumps_frames([np.zeros(40 << 10, np.uint8), np.ones(40 << 10, np.uint8)]))
            raw.send_multipart(wire.dumps_frames(["small"]))
            assert receive(ds, 1)[0] == ["small"]
        finally:
            raw.close(linger=1000)
            ctx.term()
        assert ds.num_malformed == 1
    finally:
        ds.close()
    with pytest.raises(ValueError, match="max_message_bytes"):
        RemoteDataZMQ("tcp://127.0.0.1:*", max_message_bytes=10)


def test_sender_that_fails_while_connected_never_hangs_on_cleanup(receiver):
    # closing the monitor socket before disabling the monitor deadlocked about 1 time in 50
    class Big(DataFlow):
        def __iter__(self):
            yield [np.zeros(2 << 10, np.uint8)]

    done = []

    def fail_many_times():
        for _ in range(200):
            with pytest.raises(ValueError, match="max_message_bytes"):
                send_dataflow_zmq(Big(), receiver.addresses[0], num_epochs=1, timeout=5, max_message_bytes=1024)
        done.append(True)

    t = threading.Thread(target=fail_many_times, daemon=True)
    t.start()
    t.join(180)
    assert done, "send_dataflow_zmq hung while cleaning up"


def test_garbage_raises_when_asked():
    ds = RemoteDataZMQ("tcp://127.0.0.1:*", timeout=30, on_malformed="raise")
    ds.reset_state()
    ctx = zmq.Context()
    raw = ctx.socket(zmq.PUSH)
    try:
        raw.connect(ds.addresses[0])
        raw.send(b"garbage bytes")
        with pytest.raises(ValueError, match=ds.addresses[0].replace(".", r"\.")):
            receive(ds, 1)
    finally:
        raw.close(linger=0)
        ctx.term()
        ds.close()


def test_send_in_thread_receive_in_process(receiver):
    errors = []

    def send():
        try:
            send_dataflow_zmq(Counter(50), receiver.addresses[0], num_epochs=1, timeout=20)
        except BaseException as e:  # noqa: B902
            errors.append(e)

    t = threading.Thread(target=send, daemon=True)
    t.start()
    got = receive(receiver, 50)
    t.join(30)
    assert not t.is_alive() and not errors
    assert [g[1] for g in got] == list(range(50))
    assert all((g[0] == np.arange(g[1], g[1] + 300)).all() for g in got)


def test_sender_with_nobody_listening_raises_naming_the_address():
    with socket_free_port() as port:
        addr = f"tcp://127.0.0.1:{port}"
    with pytest.raises(TimeoutError, match=addr.replace(".", r"\.")):
        send_dataflow_zmq(Counter(3), addr, timeout=1, num_epochs=1)


def test_sender_bind_mode_with_nobody_connecting_times_out():
    with pytest.raises(TimeoutError, match="no receiver"):
        send_dataflow_zmq(Counter(3), "tcp://127.0.0.1:*", bind=True, timeout=1, num_epochs=1)


def test_receiver_timeout_names_the_address(receiver):
    ds = RemoteDataZMQ("tcp://127.0.0.1:*", timeout=0.5)
    ds.reset_state()
    try:
        with pytest.raises(TimeoutError, match="nothing arrived on tcp://127.0.0.1:"):
            receive(ds, 1)
    finally:
        ds.close()


def test_bad_arguments_are_clear():
    with pytest.raises(TypeError, match="DataFlow"):
        send_dataflow_zmq([[1]], "tcp://127.0.0.1:5555")
    with pytest.raises(ValueError, match="format"):
        send_dataflow_zmq(Counter(1), "tcp://127.0.0.1:5555", format="zmq_ops")
    with pytest.raises(ValueError, match="cannot connect"):
        send_dataflow_zmq(Counter(1), "nonsense://x", timeout=1)
    with pytest.raises(ValueError, match="on_malformed"):
        RemoteDataZMQ("tcp://127.0.0.1:*", on_malformed="ignore")


def test_receiver_lifecycle_errors():
    ds = RemoteDataZMQ("tcp://127.0.0.1:*")
    with pytest.raises(RuntimeError, match="reset_state"):
        next(iter(ds))
    ds.reset_state()
    with pytest.raises(RuntimeError, match="already called"):
        ds.reset_state()
    ds.close()
    ds.close()
    with pytest.raises(RuntimeError, match="closed"):
        next(iter(ds))


def test_second_receiver_on_a_used_port_is_a_clear_error(receiver):
    other = RemoteDataZMQ(receiver.addresses[0])
    with pytest.raises(ValueError, match="cannot bind"):
        other.reset_state()
    other.close()


class socket_free_port:
    """A port that was free a moment ago (for the 'nobody listens' test only)."""

    def __enter__(self):
        import socket
        self.s = socket.socket()
        self.s.bind(("127.0.0.1", 0))
        return self.s.getsockname()[1]

    def __exit__(self, *exc):
        self.s.close()
