"""Faults of the data side, with real processes, sockets and files: malformed and huge messages on
every socket (RemoteDataZMQ, the runner's and the parallel map's local sockets), truncated and
garbled LMDB files (read in a subprocess: no signal death, an error naming the file), truncated
JPEGs (an error naming the file, or skipped and counted)."""
import os
import random
import shutil
import subprocess
import sys
import textwrap
import time

import msgpack
import numpy as np
import pytest
import zmq

pytestmark = pytest.mark.slow

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(TESTS)
sys.path.insert(0, TESTS)
import _zmtp  # noqa: E402

from kerastrainer.dataflow import (DataFlow, DataFlowWorkerError, ImageFromFile, LMDBSerializer,  # noqa: E402
                                   MultiProcessMapDataZMQ, MultiProcessRunnerZMQ, RemoteDataZMQ, wire)
from kerastrainer.dataflow.image import BadImageError, read_image  # noqa: E402

PROG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train_prog.py")


def _env():
    return dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
                TF_CPP_MIN_LOG_LEVEL="2")


# --------------------------------------------------------------------------- hostile messages

def _hostile_dtype():
    """16-ish bytes that made numpy's dtype parser raise SyntaxError."""
    inner = msgpack.packb(["i4,(", [1], b"\0" * 4], use_bin_type=True)
    return wire.HEADER_MAGIC + msgpack.packb(msgpack.ExtType(1, inner), use_bin_type=True)


def _malformed_messages():
    """Every kind of bad message a peer can send with a normal zmq socket."""
    rng = random.Random(0)
    good = [bytes(f) for f in wire.dumps_frames([np.zeros((40, 40), np.float32), 3, "x"])]
    msgs = [[_hostile_dtype()], [os.urandom(100)], [b""], [wire.HEADER_MAGIC], [wire.BUFFER_MAGIC + os.urandom(96)],
            [b"KTERR", b"\x81\xa5owner\xa4fake"], [b"KTS1" + os.urandom(14), b"x"], [b"H", bytes(8)],
            [b"D", bytes(8)] + good, good[:1], good + [b"extra"], [good[0], b"\0" * 10]]
    for _ in range(20):
        h = bytearray(good[0])
        h[rng.randrange(4, len(h))] = rng.randrange(256)
        msgs.append([bytes(h)] + good[1:])
    return msgs


class _send_all:
    """Send ``msgs`` from a thread while the receiver reads; ``join()`` closes the connection.

    Stay connected until the receiver has read what it needs: zmq drops the bytes of a
    closed connection that back-pressure (the receiver's HWM) kept in the kernel buffer.
    """

    def __init__(self, endpoint, msgs, socket_type=zmq.PUSH):
        import threading
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._send, args=(endpoint, msgs, socket_type), daemon=True)
        self.thread.start()

    def _send(self, endpoint, msgs, socket_type):
        ctx = zmq.Context()
        s = ctx.socket(socket_type)
        try:
            s.connect(endpoint)
            for m in msgs:
                s.send_multipart(m)
            self.stop.wait(120)
        finally:
            s.close(linger=5000)
            ctx.term()

    def join(self, timeout=60):
        self.stop.set()
        self.thread.join(timeout)


def _claim_huge_frame(endpoint, socket_type=b"PUSH"):
    """Announce a 2 GiB frame; True when the receiver closes the connection instead of buffering."""
    peer = _zmtp.connect_push(endpoint, socket_type)
    try:
        peer.sendall(_zmtp.long_frame_header(2 << 30) + b"x" * 65536)
        return _zmtp.closed_by_peer(peer, timeout=30)
    finally:
        peer.close()


class Numbers(DataFlow):
    def __init__(self, n=10 ** 9, delay=0.002):
        self.n, self.delay = n, delay

    def __iter__(self):
        for i in range(self.n):
            time.sleep(self.delay)
            yield [np.full((30, 40), i % 1000, np.int32), i % 1000]


def _check(dp):
    arr, i = dp
    assert arr.shape == (30, 40) and arr.dtype == np.int32 and (arr == i).all() and i >= 0


SENDER = textwrap.dedent("""
    import sys, time
    import numpy as np
    from kerastrainer.dataflow import DataFlow, send_dataflow_zmq

    class Data(DataFlow):
        def __iter__(self):
            for i in range(200):
                time.sleep(0.01)
                yield [np.full((30, 40), i, np.int32), i]

    send_dataflow_zmq(Data(), sys.argv[1], num_epochs=1, timeout=60)
    print("SENT", flush=True)
""")


@pytest.mark.parametrize("on_malformed", ["warn"])
def test_remote_receiver_survives_every_malformed_and_huge_message(on_malformed):
    ds = RemoteDataZMQ("tcp://127.0.0.1:*", timeout=60, on_malformed=on_malformed)
    ds.reset_state()
    sender = subprocess.Popen([sys.executable, "-c", SENDER, ds.addresses[0]], env=_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        it = iter(ds)
        got = [next(it)]
        msgs = _malformed_messages()
        ds.max_message_bytes = 1 << 20
        # the last one: two frames under the limit each, over it together
        big = [wire.dumps_frames([np.zeros(700 << 10, np.uint8), np.zeros(700 << 10, np.uint8)])]
        senders = [_send_all(ds.addresses[0], msgs + big)]
        assert _claim_huge_frame(ds.addresses[0]), "a 2 GiB frame claim was accepted"
        while sum(len(dp) == 2 for dp in got) < 200:   # a mutated header can still be a valid message
            got.append(next(it))
        for t in senders:
            t.join(60)
        out, err = sender.communicate(timeout=120)
        assert sender.returncode == 0 and "SENT" in out, err[-2000:]
    finally:
        if sender.poll() is None:
            sender.kill()
            sender.wait(10)
        ds.close()
    ours = [dp for dp in got if len(dp) == 2]
    for dp in ours:
        _check(dp)
    assert sorted(dp[1] for dp in ours) == list(range(200))
    # every message above was skipped but the valid mutations (the 2 GiB claim was cut off by zmq)
    assert ds.num_malformed == len(msgs) + 1 - (len(got) - len(ours))


def _other_process_sends(endpoint, socket_type="PUSH"):
    """Garbage from another process (the Popen: wait for it after reading on)."""
    code = textwrap.dedent(f"""
        import os, sys, zmq
        ctx = zmq.Context()
        s = ctx.socket(zmq.{socket_type})
        s.connect({endpoint!r})
        for _ in range(5):
            s.send(os.urandom(100))
        s.send_multipart([b"KTERR", b"fake error"])
        print("SENT", flush=True)
        sys.stdin.read()   # stay connected until the test has read on (see _send_all)
        s.close(linger=5000)
        ctx.term()
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], env=_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "SENT"
    return proc


def _finish(proc):
    proc.stdin.close()
    return proc.wait(60)


def test_runner_local_socket_survives_garbage_and_huge_claims():
    r = MultiProcessRunnerZMQ(Numbers(), num_proc=2, hwm=4)
    r.reset_state()
    try:
        it = iter(r)
        _check(next(it))
        expected = len(_malformed_messages()) + 6
        other = _other_process_sends(r.address)
        t = _send_all(r.address, _malformed_messages())
        assert _claim_huge_frame(r.address), "a 2 GiB frame claim was accepted"
        for _ in range(5000):
            _check(next(it))
            if r.num_malformed >= expected:
                break
        t.join()
        assert _finish(other) == 0
        assert r.num_malformed == expected
    finally:
        r.close()


def test_process_map_local_socket_survives_garbage_and_huge_claims():
    ds = MultiProcessMapDataZMQ(Numbers(300, delay=0.001), 2, lambda dp: dp, buffer_size=8, strict=True)
    ds.reset_state()
    try:
        assert sorted(dp[1] for dp in ds) == list(range(300))
        other = _other_process_sends(ds.address, "DEALER")
        t = _send_all(ds.address, _malformed_messages(), zmq.DEALER)
        assert _claim_huge_frame(ds.address, b"DEALER"), "a 2 GiB frame claim was accepted"
        for _ in range(2):
            got = list(ds)
            for dp in got:
                _check(dp)
            assert sorted(dp[1] for dp in got) == list(range(300))
        t.join()
        assert _finish(other) == 0
        assert ds.num_malformed == 6 + len(_malformed_messages())
    finally:
        ds.close()


def _connect_as_other_user(endpoint, uid=65534):
    """In a forked child running as ``uid``: 0 if the socket refuses us, 1 if it takes our garbage."""
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            os.setgid(uid)
            os.setuid(uid)
            try:
                peer = _zmtp.connect_push(endpoint)
            except (ConnectionError, OSError):
                code = 0
            else:
                try:
                    peer.sendall(b"\x00\x64" + os.urandom(100))   # one 100-byte frame
                    code = 0 if _zmtp.closed_by_peer(peer, timeout=5) else 1
                except OSError:
                    code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to act as another user")
def test_local_sockets_refuse_other_users():
    r = MultiProcessRunnerZMQ(Numbers(), num_proc=1, hwm=4)
    r.reset_state()
    ds = MultiProcessMapDataZMQ(Numbers(50, delay=0), 1, lambda dp: dp, buffer_size=4, strict=True)
    ds.reset_state()
    try:
        it = iter(r)
        _check(next(it))
        assert _connect_as_other_user(r.address) == 0
        assert _connect_as_other_user(ds.address) == 0
        for _ in range(100):
            _check(next(it))
        assert len(list(ds)) == 50
        assert r.num_malformed == 0 and ds.num_malformed == 0   # refused: nothing of it even arrived
    finally:
        r.close()
        ds.close()


def _runner_sockets(pid):
    """The abstract ipc names of a process's runners, as any local user can list them."""
    names = []
    with open("/proc/net/unix") as f:
        for line in f:
            path = line.split()[-1]
            if path.startswith(f"@kt-runner-{pid}-"):
                names.append("ipc://" + path)
    return sorted(set(names))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="abstract ipc names are Linux-only")
def test_training_survives_garbage_on_its_runner_socket(tmp_path):
    proc = subprocess.Popen([sys.executable, PROG, str(tmp_path / "log"), "--workers", "1", "--delay", "0.02",
                             "--epochs", "2", "--steps", "30"], env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("STEP 3"):
                break
        pid = int(next(x for x in lines if x.startswith("PID")).split()[1])
        socks = _runner_sockets(pid)
        assert socks, "".join(lines)
        for s in socks:
            _send_all(s, [[os.urandom(100)]] + _malformed_messages()).join(120)
        rest, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    out = "".join(lines) + rest
    assert proc.returncode == 0 and "DONE" in out, out[-3000:]
    assert "did not come from its workers" in out


# --------------------------------------------------------------------------- damaged LMDB

READ_LMDB = textwrap.dedent("""
    import sys
    from kerastrainer.dataflow import LMDBSerializer, MultiProcessRunnerZMQ
    ds = LMDBSerializer.load(sys.argv[1], shuffle=False)
    if sys.argv[2] == "worker":
        ds = MultiProcessRunnerZMQ(ds, num_proc=1)
    ds.reset_state()
    n = 0
    for _ in ds:
        n += 1
    print("READ", n)
""")


def _read_lmdb(path, where="main"):
    p = subprocess.run([sys.executable, "-c", READ_LMDB, path, where], env=_env(), capture_output=True, text=True,
                       timeout=300)
    return p.returncode, p.stdout + p.stderr


@pytest.fixture(scope="module")
def lmdb_file(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("lmdb") / "train.lmdb")
    dps = [[np.full((16, 16), i, np.float32), "x" * (i % 50), i] for i in range(2000)]
    dps += [[np.full((64, 64, 3), i, np.uint8), "big", i] for i in range(50)]   # overflow pages

    class L(DataFlow):
        def __iter__(self):
            return iter(dps)
    LMDBSerializer.save(L(), path)
    return path


@pytest.mark.parametrize("where", ["main", "worker"])
@pytest.mark.parametrize("frac", [0.0, 0.0005, 0.002, 0.3, 0.9, 0.999])
def test_truncated_lmdb_is_an_error_naming_the_file(lmdb_file, tmp_path, frac, where):
    path = str(tmp_path / "cut.lmdb")
    shutil.copy(lmdb_file, path)
    os.truncate(path, int(os.path.getsize(path) * frac))
    rc, out = _read_lmdb(path, where)
    assert rc not in (135, -7, 138, -11, 139), f"signal death (rc {rc}): {out[-2000:]}"
    assert rc != 0 and "cut.lmdb" in out and ("truncated" in out or "empty" in out), out[-2000:]


@pytest.mark.parametrize("seed", range(16))
def test_garbage_inside_lmdb_is_an_error_naming_the_file(lmdb_file, tmp_path, seed):
    rng = random.Random(seed)
    path = str(tmp_path / "garbled.lmdb")
    shutil.copy(lmdb_file, path)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        for _ in range(rng.randint(1, 4)):
            f.seek(rng.randrange(8192, size - 4096))   # past the meta pages
            f.write(os.urandom(rng.choice([16, 100, 4096])))
    rc, out = _read_lmdb(path)
    assert rc not in (135, -7, 138, -11, 139), f"signal death (rc {rc}): {out[-2000:]}"
    if rc != 0:   # garbage inside array bytes can decode: no checksum in the format
        assert "garbled.lmdb" in out and "damaged" in out, out[-2000:]


# --------------------------------------------------------------------------- truncated JPEG

def _jpegs(tmp_path, n=6, cut=(1, 4)):
    cv2 = pytest.importorskip("cv2")
    paths = []
    for i in range(n):
        img = (np.random.RandomState(i).rand(64, 96, 3) * 255).astype(np.uint8)
        data = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes()
        if i in cut:
            data = data[:len(data) * 2 // 3]
        p = str(tmp_path / f"img{i}.jpg")
        open(p, "wb").write(data)
        paths.append(p)
    return paths


def test_truncated_jpeg_is_skipped_and_counted_or_an_error(tmp_path):
    paths = _jpegs(tmp_path)
    ds = ImageFromFile(paths, skip_bad=True)
    ds.reset_state()
    assert len(list(ds)) == 4 and ds.num_skipped == 2
    ds = ImageFromFile(paths)
    ds.reset_state()
    with pytest.raises(BadImageError, match="img1.jpg.*truncated"):
        list(ds)


def test_truncated_jpeg_in_a_map_worker_names_the_file(tmp_path):
    paths = _jpegs(tmp_path, cut=(3,))

    class Files(DataFlow):
        def __iter__(self):
            return iter([[p] for p in paths])

    ds = MultiProcessMapDataZMQ(Files(), 2, lambda dp: [read_image(dp[0])], strict=True)
    ds.reset_state()
    try:
        with pytest.raises(DataFlowWorkerError, match="img3.jpg.*truncated"):
            list(ds)
    finally:
        ds.close()
