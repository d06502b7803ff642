"""Faults injected at the edges: hostile ZeroMQ peers, damaged files, bad arguments.

Every test uses real sockets, files or processes: a PUSH socket or a raw ZMTP peer sends what
a hostile or buggy sender would; files are written by our serializers and then damaged on disk.
"""
import logging
import math
import os
import sys

import msgpack
import numpy as np
import pytest
import zmq

from kerastrainer.dataflow import wire
from kerastrainer.dataflow.base import DataFlow
from kerastrainer.dataflow.remote import RemoteDataZMQ, send_dataflow_zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


class _Push:
    """A real PUSH socket connected to ``addr`` (a peer that sends whatever it is told)."""

    def __init__(self, addr):
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.PUSH)
        self.sock.connect(addr)

    def __enter__(self):
        return self.sock

    def __exit__(self, *exc):
        self.sock.close(linger=2000)
        self.ctx.term()


@pytest.fixture
def make_receiver():
    made = []

    def make(**kw):
        kw.setdefault("timeout", 30)
        ds = RemoteDataZMQ("tcp://127.0.0.1:*", **kw)
        ds.reset_state()
        made.append(ds)
        return ds

    yield make
    for ds in made:
        ds.close()


# --- item 1: a multipart message is bounded as a whole --------------------------------------------
def test_frame_count_bomb_is_refused_naming_peer_and_limit(make_receiver):
    ds = make_receiver(on_malformed="raise")
    with _Push(ds.addresses[0]) as push:
        push.send_multipart([wire.HEADER_MAGIC + b"\x90"] + [b"x"] * 20_000)   # 20001 tiny frames
        push.send_multipart(wire.dumps_frames(["good"]))
        it = iter(ds)
        with pytest.raises(ValueError) as err:
            next(it)
        msg = str(err.value)
        assert "more than 10000 frames (max_message_frames)" in msg
        assert "from 127.0.0.1" in msg and ds.addresses[0] in msg
        assert "20001 frames" in msg   # what was refused, counted while it was dropped
        # the rest of the refused message was drained: the next message is whole
        assert next(iter(ds)) == ["good"]


def test_multipart_over_the_byte_limit_is_refused_before_the_rest_is_kept(make_receiver):
    ds = make_receiver(max_message_bytes=1 << 20, on_malformed="raise")
    frame = b"\0" * (256 << 10)
    with _Push(ds.addresses[0]) as push:
        # each frame is under the per-frame limit ZeroMQ enforces; together they are 10 MiB
        push.send_multipart([wire.HEADER_MAGIC + b"\x90"] + [frame] * 40, copy=False)
        push.send_multipart(wire.dumps_frames([np.arange(2000), "good"]))
        with pytest.raises(ValueError) as err:
            next(iter(ds))
        arr, tag = next(iter(ds))
    msg = str(err.value)
    assert "from 127.0.0.1" in msg and "more than 1048576 bytes (max_message_bytes)" in msg
    assert "none of it kept or decoded (it had 41 frames" in msg
    assert tag == "good" and (arr == np.arange(2000)).all()


def test_sender_refuses_a_datapoint_of_too_many_frames_before_sending():
    arrays = [np.zeros(2000, np.uint8) for _ in range(20)]   # 20 frames of their own
    with pytest.raises(ValueError, match="max_message_frames=10"):
        send_dataflow_zmq(_Once([arrays]), "tcp://127.0.0.1:9", max_message_frames=10, num_epochs=1, timeout=5)


class _Once(DataFlow):
    def __init__(self, dps):
        self.dps = dps

    def __iter__(self):
        yield from self.dps


# --- item 2: nothing outside the wire format is data ----------------------------------------------
@pytest.mark.parametrize("ts", [msgpack.Timestamp(5, 0), msgpack.Timestamp(2 ** 33, 7), msgpack.Timestamp(2 ** 40, 1)])
def test_msgpack_timestamp_extension_is_refused(make_receiver, ts):
    ds = make_receiver(on_malformed="raise")
    with _Push(ds.addresses[0]) as push:
        push.send(wire.HEADER_MAGIC + msgpack.packb([ts, 1], datetime=False))
        with pytest.raises(ValueError, match="msgpack.ext.Timestamp.*not part of kerastrainer's wire format"):
            next(iter(ds))
        push.send(wire.HEADER_MAGIC + msgpack.packb({"k": {ts: 1}}, datetime=False))   # as a dict key
        with pytest.raises(ValueError, match="Timestamp"):
            next(iter(ds))


def test_unknown_extension_type_is_refused_and_bytes_that_look_like_one_are_data(make_receiver):
    ds = make_receiver(on_malformed="raise")
    with _Push(ds.addresses[0]) as push:
        push.send(wire.HEADER_MAGIC + msgpack.packb(msgpack.ExtType(42, b"x")))
        with pytest.raises(ValueError, match="extension type 42 is not part"):
            next(iter(ds))
        # the byte patterns of a Timestamp inside bytes and arrays are plain data
        dp = [b"\xd6\xff\xd7\xff\xc7\x0c\xff", np.frombuffer(b"\xd7\xff" * 600, np.uint8), {"s": "t"}]
        push.send_multipart(wire.dumps_frames(dp))
        got = next(iter(ds))
    assert got[0] == dp[0] and (got[1] == dp[1]).all() and got[2] == {"s": "t"}


def test_recursion_bomb_is_refused_saying_why(make_receiver):
    ds = make_receiver(on_malformed="raise")
    with _Push(ds.addresses[0]) as push:
        push.send(wire.HEADER_MAGIC + b"\x91" * 100_000 + b"\xc0")
        with pytest.raises(ValueError, match=r"nested deeper than 1024 levels.*recursion bomb"):
            next(iter(ds))


# --- item 9 (data side): arguments that meant nothing ---------------------------------------------
@pytest.mark.parametrize("timeout", [math.nan, -5, 0, "10", math.inf, True])
def test_receiver_timeout_is_validated_at_construction(timeout):
    with pytest.raises(ValueError, match="timeout must be a positive, finite number of seconds"):
        RemoteDataZMQ("tcp://127.0.0.1:*", timeout=timeout)


@pytest.mark.parametrize("timeout", [math.nan, -1, "30"])   # None: wait forever (tensorpack's default)
def test_sender_timeout_is_validated(timeout):
    with pytest.raises(ValueError, match="timeout must be a positive"):
        send_dataflow_zmq(_Once([[1]]), "tcp://127.0.0.1:9", timeout=timeout)


# --- item 5: a damaged .npz names its file --------------------------------------------------------
def _flip_bit_at(path, offset, bit=3):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([b ^ (1 << bit)]))


def _flip_inside(path, needle: bytes):
    """Flip one bit in the middle of every occurrence of ``needle`` in the file (LMDB's pages may
    also hold a stale copy in their unused bytes: flipping only that one would damage nothing)."""
    raw = open(path, "rb").read()
    pos = raw.find(needle)
    assert pos > 0, "the data to damage is not in the file"
    while pos >= 0:
        _flip_bit_at(path, pos + len(needle) // 2)
        pos = raw.find(needle, pos + 1)


def _truncate(path, keep_fraction=0.6):
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(int(size * keep_fraction))


_MARK = (np.arange(4000, dtype=np.int64) * 7 + 12345)


def _write_npz_dataset(path):
    from kerastrainer.dataflow.serialize import NumpySerializer
    NumpySerializer.save(_Once([[_MARK[i * 100:(i + 1) * 100], i] for i in range(40)]), path)


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_damaged_npz_dataset_names_the_file(tmp_path, damage):
    from kerastrainer.dataflow.serialize import NumpySerializer
    path = str(tmp_path / "data.npz")
    _write_npz_dataset(path)
    assert len(NumpySerializer.load(path)) == 40
    if damage == "flip":
        _flip_inside(path, _MARK[1000:1100].tobytes())
    else:
        _truncate(path)
    with pytest.raises(ValueError, match=rf"NumpySerializer.load: {path!r} is damaged.*copy or write it again"):
        NumpySerializer.load(path)


@pytest.mark.parametrize("damage", ["flip", "truncate", "flip-header"])
def test_damaged_npz_weights_for_smartinit_name_the_file(tmp_path, damage):
    from kerastrainer.tfutils.sessinit import SmartInit
    path = str(tmp_path / "weights.npz")
    np.savez(path, **{"conv0/W": _MARK.astype(np.float32).reshape(40, 100), "fc/b": np.ones(3, np.float32)})
    assert SmartInit(path) is not None
    if damage == "flip":
        _flip_inside(path, _MARK.astype(np.float32)[2000:2100].tobytes())
    elif damage == "flip-header":
        # a shape made smaller in the array's own header: np.load would read less, check no CRC, and
        # return a wrong array without a word
        raw = open(path, "rb").read()
        pos = raw.find(b"(40, 100)")
        with open(path, "r+b") as f:
            f.seek(pos)
            f.write(b"(30, 100)")
    else:
        _truncate(path)
    with pytest.raises(ValueError, match=rf"SmartInit: {path!r} is damaged"):
        SmartInit(path)


# --- item 3: our own serializers' files carry checksums -------------------------------------------
@pytest.fixture
def warnings_of_kerastrainer(caplog):
    import logging

    from kerastrainer.utils import logger
    logger._logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.WARNING, logger="kerastrainer"):
            yield caplog
    finally:
        logger._logger.removeHandler(caplog.handler)


def _marked_dataflow(n=40):
    # record i holds a slice of _MARK (unique bytes to find and damage on disk) and a small image
    return _Once([[_MARK[i * 100:(i + 1) * 100].copy(), np.full((8, 8, 3), i, np.uint8), i] for i in range(n)])


@pytest.mark.parametrize("shuffle", [False, True])
def test_lmdb_bit_flip_is_an_error_naming_file_and_record(tmp_path, shuffle):
    from kerastrainer.dataflow.serialize import LMDBSerializer
    path = str(tmp_path / "data.lmdb")
    LMDBSerializer.save(_marked_dataflow(), path)
    _flip_inside(path, _MARK[1700:1800].tobytes())   # the first array of record 17
    ds = LMDBSerializer.load(path, shuffle=shuffle)
    ds.reset_state()
    with pytest.raises(ValueError, match=rf"record 17 \(key b'00000017'\) of {path!r} fails its checksum"):
        for _ in ds:
            pass
    ds.close()


def test_lmdb_records_are_checked_again_after_reset_state(tmp_path):
    # checked once per process and reset_state: damage after a clean epoch is found on the next reset
    from kerastrainer.dataflow.serialize import LMDBSerializer
    path = str(tmp_path / "data.lmdb")
    LMDBSerializer.save(_marked_dataflow(), path)
    ds = LMDBSerializer.load(path, shuffle=True)
    ds.reset_state()
    assert sorted(int(dp[2]) for dp in ds) == list(range(40))
    _flip_inside(path, _MARK[900:1000].tobytes())   # record 9
    ds.reset_state()
    with pytest.raises(ValueError, match=rf"record 9 \(key b'00000009'\) of {path!r} fails its checksum"):
        for _ in ds:
            pass
    ds.close()


def test_hdf5_bit_flip_is_an_error_naming_file_and_record(tmp_path):
    from kerastrainer.dataflow.serialize import HDF5Serializer
    path = str(tmp_path / "data.h5")
    HDF5Serializer.save(_marked_dataflow(), path, ["mark", "img", "label"])
    _flip_inside(path, _MARK[2300:2400].tobytes())   # record 23 of dataset 'mark'
    ds = HDF5Serializer.load(path, ["label", "mark"], shuffle=False)
    ds.reset_state()
    with pytest.raises(ValueError, match=rf"record 23 of dataset 'mark' in {path!r} fails its checksum"):
        next(iter(ds))


def test_hdf5_string_component_is_checksummed(tmp_path):
    from kerastrainer.dataflow.serialize import HDF5Serializer
    path = str(tmp_path / "names.h5")
    HDF5Serializer.save(_Once([[f"name-{i:04d}-{'q' * 40}", i] for i in range(30)]), path, ["name", "i"])
    _flip_inside(path, b"name-0012-" + b"q" * 40)
    ds = HDF5Serializer.load(path, ["name", "i"], shuffle=False)
    ds.reset_state()
    with pytest.raises(ValueError, match=r"record 12 of dataset 'name'"):
        list(ds)


def test_checksummed_files_read_back_exactly(tmp_path, warnings_of_kerastrainer):
    from kerastrainer.dataflow.serialize import HDF5Serializer, LMDBSerializer
    want = list(_marked_dataflow(13))
    LMDBSerializer.save(_Once(want), str(tmp_path / "a.lmdb"))
    HDF5Serializer.save(_Once(want), str(tmp_path / "a.h5"), ["m", "img", "label"])
    for ds in (LMDBSerializer.load(str(tmp_path / "a.lmdb"), shuffle=False),
               HDF5Serializer.load(str(tmp_path / "a.h5"), ["m", "img", "label"], shuffle=False)):
        ds.reset_state()
        got = list(ds)
        assert len(got) == 13
        for g, w in zip(got, want):
            assert (g[0] == w[0]).all() and (g[1] == w[1]).all() and int(g[2]) == w[2]
    assert "checksum" not in warnings_of_kerastrainer.text


def test_files_written_before_checksums_are_read_with_one_warning(tmp_path, warnings_of_kerastrainer):
    import h5py
    import lmdb

    from kerastrainer.dataflow.serialize import HDF5Serializer, LMDBSerializer
    # the layouts of the previous release: bare wire values and a bare list of keys; plain datasets
    old_lmdb = str(tmp_path / "old.lmdb")
    env = lmdb.open(old_lmdb, subdir=False, lock=False, map_size=1 << 22)
    with env.begin(write=True) as txn:
        keys = [b"%08d" % i for i in range(5)]
        for i, k in enumerate(keys):
            txn.put(k, wire.dumps([np.full(300, i), i]))
        txn.put(b"__keys__", wire.dumps(keys))
    env.close()
    old_h5 = str(tmp_path / "old.h5")
    with h5py.File(old_h5, "w") as hf:
        hf.create_dataset("x", data=np.arange(10))
    for _ in range(2):
        ds = LMDBSerializer.load(old_lmdb, shuffle=False)
        ds.reset_state()
        assert [int(dp[1]) for dp in ds] == [0, 1, 2, 3, 4]
        ds.close()
        ds = HDF5Serializer.load(old_h5, ["x"], shuffle=False)
        ds.reset_state()
        assert [int(dp[0]) for dp in ds] == list(range(10))
    text = warnings_of_kerastrainer.text
    assert text.count("carries no checksums") == 2, text   # once per file, not per load or epoch
    assert "old.lmdb" in text and "old.h5" in text


@pytest.mark.parametrize("size", [300, 200, 150])
def test_tfrecord_size_larger_than_the_file_is_an_error_not_repeats(tmp_path, size):
    from kerastrainer.dataflow.serialize import TFRecordSerializer
    path = str(tmp_path / "d.tfrecord")
    TFRecordSerializer.save(_Once([[i] for i in range(200)]), path)
    ds = TFRecordSerializer.load(path, size=size)
    ds.reset_state()
    if size > 200:
        seen = []
        with pytest.raises(ValueError, match=rf"{path!r} holds 200 records but size=300.*Give size=200"):
            for dp in ds:
                seen.append(dp[0])
        assert seen == list(range(200))   # every record once, none repeated
    else:
        first, second = [dp[0] for dp in ds], [dp[0] for dp in ds]
        assert first == list(range(size))
        assert second == (list(range(200)) if size == 200 else list(range(150, 200)) + list(range(100)))


# --- item 6: a checkpoint directory that cannot be written is found when training starts ----------
_TRAIN_INTO = """
import os, sys
sys.path.insert(0, {tests!r})
from test_callbacks import MiniTrainer
from kerastrainer.callbacks import Callback, ModelSaver

class Count(Callback):
    steps = 0

    def _trigger_step(self):
        Count.steps += 1

for d in sys.argv[1:]:
    Count.steps = 0
    try:
        MiniTrainer([ModelSaver(checkpoint_dir=d), Count()], steps_per_epoch=3, max_epoch=2).train()
        print("TRAINED", Count.steps)
    except Exception as e:
        print("ERROR", type(e).__name__, e, "| STEPS", Count.steps)
"""


@pytest.mark.slow   # two trainings in a new process: ~10 s, most of it importing TensorFlow
def test_unwritable_checkpoint_directory_is_refused_before_training_naming_the_cause(tmp_path):
    import shutil
    import subprocess
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode:
        pytest.skip("needs unshare -m (a mount namespace of its own) to mount a read-only and a full file system")
    ro, full = tmp_path / "ro", tmp_path / "full"
    ro.mkdir()
    full.mkdir()
    script = tmp_path / "train.py"
    script.write_text(_TRAIN_INTO.format(tests=os.path.dirname(os.path.abspath(__file__))))
    # the mounts live in the child's own mount namespace: nothing outside the test sees them
    shell = (f"mount -t tmpfs -o ro,size=1m tmpfs {ro} && mount -t tmpfs -o size=64k tmpfs {full} || exit 97; "
             f"dd if=/dev/zero of={full}/fill bs=4k count=64 2>/dev/null; exec {sys.executable} {script} {ro} {full}")
    p = subprocess.run(["unshare", "-m", "sh", "-c", shell], capture_output=True, text=True, timeout=300)
    if p.returncode == 97:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr[-300:]}")
    assert p.returncode == 0, p.stderr[-3000:]
    out_ro, out_full = [line for line in p.stdout.splitlines() if line.startswith(("ERROR", "TRAINED"))]
    assert out_ro.startswith("ERROR CheckpointWriteError"), p.stdout
    assert f"cannot write checkpoints in {ro}: it is on a read-only file system" in out_ro
    assert "Remount it read-write" in out_ro and "Free space" not in out_ro and "free there" not in out_ro
    assert out_ro.endswith("| STEPS 0")   # found at the start, not after an epoch of training
    assert out_full.startswith("ERROR CheckpointWriteError") and "the disk is full" in out_full
    assert "Free space there" in out_full and out_full.endswith("| STEPS 0")


# --- item 10: an export that fails for want of space leaves nothing behind ------------------------
_EXPORT_ONTO_FULL_DISK = """
import os, shutil, sys
sys.path.insert(0, {tests!r})
from _models import MLP
from kerastrainer.predict import ModelExporter, PredictConfig

small, scratch = sys.argv[1], sys.argv[2]
exporter = ModelExporter(PredictConfig(model=MLP(), input_names=["x"], output_names=["prob"]))
exporter.export_serving(os.path.join(scratch, "probe"))          # how much room an export takes
sizes = {{}}
for root, _, files in os.walk(os.path.join(scratch, "probe")):
    for f in files:
        sizes[os.path.relpath(os.path.join(root, f), scratch)] = os.path.getsize(os.path.join(root, f))
variables = sum(v for k, v in sizes.items() if "/variables/" in k)
# fill the small file system until the variables fit but the rest does not
st = os.statvfs(small)
free = st.f_bavail * st.f_frsize
with open(os.path.join(small, "filler"), "wb") as f:
    f.write(b"\\0" * max(0, free - (variables + 3 * 4096)))
target = os.path.join(small, "export")
try:
    exporter.export_serving(target)
    print("EXPORTED ONTO A FULL DISK", sorted(sizes.items()))
except OSError as e:
    print("FAILED", e)
print("LEFT", sorted(os.listdir(small)))
os.remove(os.path.join(small, "filler"))
exporter.export_serving(target)                                   # the retry after freeing space
print("RETRY", sorted(os.listdir(target)))
"""


@pytest.mark.slow   # TensorFlow in a new process and three exports: ~15 s
def test_export_onto_a_full_disk_leaves_nothing_and_the_retry_works(tmp_path):
    import shutil
    import subprocess
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode:
        pytest.skip("needs unshare -m (a mount namespace of its own) to mount a small file system")
    small, scratch = tmp_path / "small", tmp_path / "scratch"
    small.mkdir()
    scratch.mkdir()
    script = tmp_path / "export.py"
    script.write_text(_EXPORT_ONTO_FULL_DISK.format(tests=os.path.dirname(os.path.abspath(__file__))))
    shell = f"mount -t tmpfs -o size=2m tmpfs {small} || exit 97; exec {sys.executable} {script} {small} {scratch}"
    p = subprocess.run(["unshare", "-m", "sh", "-c", shell], capture_output=True, text=True, timeout=300)
    if p.returncode == 97:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr[-300:]}")
    assert p.returncode == 0, p.stderr[-3000:]
    lines = {line.split(" ", 1)[0]: line for line in p.stdout.splitlines() if line.startswith(("FAILED", "LEFT",
                                                                                                "RETRY", "EXPORTED"))}
    assert "FAILED" in lines, p.stdout
    assert "No space left on device" in lines["FAILED"] and "Nothing was left behind" in lines["FAILED"]
    assert lines["LEFT"] == "LEFT ['filler']"            # no export/, no variables/, no temporary directory
    assert "saved_model.pb" in lines["RETRY"] and "variables" in lines["RETRY"]


# --- item 9 (data side): a worker count that no process can run -----------------------------------
@pytest.mark.parametrize("runner", ["MultiProcessRunnerZMQ", "MultiProcessRunner", "MultiProcessMapDataZMQ"])
def test_absurd_num_proc_is_refused_before_forking(runner):
    import multiprocessing

    from kerastrainer.dataflow import DataFromList, parallel, parallel_map
    before = len(multiprocessing.active_children())
    df = DataFromList([[1]] * 4)
    make = {"MultiProcessRunnerZMQ": lambda n: parallel.MultiProcessRunnerZMQ(df, num_proc=n),
            "MultiProcessRunner": lambda n: parallel.MultiProcessRunner(df, num_prefetch=4, num_proc=n),
            "MultiProcessMapDataZMQ": lambda n: parallel_map.MultiProcessMapDataZMQ(df, num_proc=n,
                                                                                   map_func=lambda x: x)}[runner]
    with pytest.raises(ValueError, match=rf"{runner}: num_proc=1000000 is more than this process can run: at most"):
        make(10 ** 6)
    assert len(multiprocessing.active_children()) == before


def test_num_proc_bound_follows_the_open_file_limit():
    import resource
    import subprocess
    # in a child whose open-file limit is 200: ~30 workers fit, 100 do not (and none is forked)
    code = ("import resource; resource.setrlimit(resource.RLIMIT_NOFILE, (200, resource.getrlimit("
            "resource.RLIMIT_NOFILE)[1]))\n"
            "from kerastrainer.dataflow import DataFromList, MultiProcessRunnerZMQ\n"
            "MultiProcessRunnerZMQ(DataFromList([[1]]), num_proc=8)\n"
            "try:\n    MultiProcessRunnerZMQ(DataFromList([[1]]), num_proc=100)\n"
            "except ValueError as e:\n    print(e)\n")
    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 200:
        pytest.skip("the hard open-file limit is under 200")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "num_proc=100 is more than this process can run" in out.stdout, out.stderr[-2000:]
    assert "open-file limit of 200 (ulimit -n)" in out.stdout


# --- found on the way: LMDB files carried the writer's freed heap memory --------------------------
def test_lmdb_file_holds_no_stale_process_memory(tmp_path):
    from kerastrainer.dataflow.serialize import LMDBSerializer
    marker = b"NOT-DATA-SECRET-"
    for trial in range(3):
        junk = [bytearray(marker * 256) for _ in range(2000)]   # 8 MiB of it on the heap, then freed
        del junk
        path = str(tmp_path / f"{trial}.lmdb")
        LMDBSerializer.save(_Once([[np.arange(i % 50 + 1), "x" * (i % 7)] for i in range(300)]), path)
        assert marker not in open(path, "rb").read()


# --- found on the way: arguments of the remote pair -----------------------------------------------
@pytest.mark.parametrize("value", [math.nan, "1e9", 2 ** 70, 1.5, True, 100])
def test_max_message_bytes_is_validated_with_a_clear_error(value):
    with pytest.raises(ValueError, match="max_message_bytes"):
        RemoteDataZMQ("tcp://127.0.0.1:*", max_message_bytes=value)


def test_sender_with_a_very_long_timeout_still_sends(make_receiver):
    import threading
    ds = make_receiver()
    sent = []
    t = threading.Thread(target=lambda: sent.append(
        send_dataflow_zmq(_Once([[np.arange(3000)], ["x"]]), ds.addresses[0], timeout=1e12, num_epochs=1)))
    t.start()
    it = iter(ds)
    got = [next(it), next(it)]
    t.join(60)
    assert sent == [2] and (got[0][0] == np.arange(3000)).all() and got[1] == ["x"]


def test_hdf5_component_named_like_the_checksum_table_is_refused(tmp_path):
    from kerastrainer.dataflow.serialize import HDF5Serializer
    with pytest.raises(ValueError, match="__kt_sum64__.*checksum table"):
        HDF5Serializer.save(_Once([[1, 2]]), str(tmp_path / "x.h5"), ["a", "__kt_sum64__"])
    assert not os.listdir(tmp_path)


# --- item 9 (training side): epochs that mean nothing, a NaN learning rate ------------------------
def _quiet(**kw):
    from kerastrainer.train import TrainConfig
    kw.setdefault("extra_callbacks", [])
    kw.setdefault("monitors", [])
    return TrainConfig(**kw)


@pytest.mark.parametrize("max_epoch", [-3, -1])
def test_negative_max_epoch_is_refused(max_epoch):
    from _models import MLP, LinearData
    with pytest.raises(ValueError, match=rf"TrainConfig\(max_epoch={max_epoch}\): max_epoch is the number of "
                                         "the last epoch.*or 0 to build the model"):
        _quiet(model=MLP(), dataflow=LinearData(), max_epoch=max_epoch)


@pytest.mark.parametrize("epochs", [dict(max_epoch=0), dict(starting_epoch=5, max_epoch=3)])
def test_no_epoch_to_run_is_said_not_silent(epochs, kt_log):
    from _models import MLP, LinearData
    from kerastrainer.train import SimpleTrainer, launch_train_with_config
    t = SimpleTrainer()
    launch_train_with_config(_quiet(model=MLP(), dataflow=LinearData(num_batches=2), **epochs), t)
    assert t.global_step == 0   # built, nothing trained, as before; now with a line saying so
    said = f"TrainConfig(max_epoch={epochs['max_epoch']}, starting_epoch={epochs.get('starting_epoch', 1)}): " \
        "no epoch will run"
    # max_epoch=0 (build and load only, Keras's fit(epochs=0)) is said; a last epoch before the first is warned
    level = logging.INFO if epochs["max_epoch"] == 0 else logging.WARNING
    assert any(said in m for m in kt_log.at_level(level)), kt_log.at_level(logging.INFO)
    assert (level == logging.WARNING) == any(said in m for m in kt_log.at_level(logging.WARNING))


def test_nan_learning_rate_is_named_before_the_first_step():
    from _models import MLP, LinearData
    from kerastrainer.train import SimpleTrainer, launch_train_with_config
    t = SimpleTrainer()
    with pytest.raises(ValueError, match=r"Training cannot start: the optimizer \(SGD\) has learning_rate=nan"):
        launch_train_with_config(_quiet(model=MLP(lr=math.nan), dataflow=LinearData(), max_epoch=1), t)
    assert t.global_step == 0


def test_inf_beta_is_named_before_the_first_step():
    import keras

    from _models import MLP, LinearData
    from kerastrainer.train import SimpleTrainer, launch_train_with_config

    class M(MLP):
        def optimizer(self):
            return keras.optimizers.Adam(1e-3, beta_1=math.inf)
    with pytest.raises(ValueError, match=r"the optimizer \(Adam\) has beta_1=inf"):
        launch_train_with_config(_quiet(model=M(), dataflow=LinearData(), max_epoch=1), SimpleTrainer())


def test_nan_learning_rate_set_during_training_is_blamed_not_the_cost():
    from _models import MLP, LinearData
    from kerastrainer.callbacks import NonFiniteLossError, ScheduledHyperParamSetter, TerminateOnNonFinite
    from kerastrainer.train import SimpleTrainer, launch_train_with_config
    setter = ScheduledHyperParamSetter("learning_rate", [(0, 0.1), (1, math.nan)])
    with pytest.raises(NonFiniteLossError) as err:
        launch_train_with_config(_quiet(model=MLP(), dataflow=LinearData(num_batches=4), max_epoch=3,
                                        callbacks=[setter], extra_callbacks=[TerminateOnNonFinite()]),
                                 SimpleTrainer(steps_per_call=1))
    msg = str(err.value)
    assert "The cause is the optimizer, not the cost: the optimizer (SGD) has learning_rate=nan" in msg
    assert "Lower the learning rate" not in msg
    assert err.value.global_step == 5   # the first step of epoch 2


# --- item 4: a restore that rounds saved values into a narrower float ----------------------------
class _Float16Target:
    """A model of two float16 variables, named as a checkpoint names them."""

    def __init__(self):
        import tensorflow as tf
        self.vars = {"fc/W": tf.Variable(np.zeros((4, 4), np.float16), name="W"),
                     "fc/b": tf.Variable(np.zeros(4, np.float16), name="b")}

    def named_variables(self):
        return dict(self.vars)


@pytest.mark.parametrize("fmt", ["checkpoint", "npz"])
def test_float32_weights_rounded_into_float16_variables_are_named(tmp_path, kt_log, fmt):
    from kerastrainer.tfutils.sessinit import SmartInit
    from kerastrainer.tfutils.varmanip import save_chkpt_vars
    w = np.random.RandomState(0).randn(4, 4).astype(np.float32)   # not representable in float16
    b = np.array([0.5, -1, 2, 0.25], np.float32)                     # exactly representable: no word
    path = str(tmp_path / ("w.npz" if fmt == "npz" else "ckpt"))
    save_chkpt_vars({"fc/W": w, "fc/b": b}, path)
    target = _Float16Target()
    SmartInit(path).init(target)
    warned = kt_log.warnings()
    assert "1 variable(s) of the model have a narrower float dtype than their saved values, which were " \
           "rounded: fc/W (float32 -> float16: 16 of 16 values changed, by up to" in warned, kt_log.text()
    assert "fc/b" not in warned and path in warned
    np.testing.assert_array_equal(target.vars["fc/W"].numpy(), w.astype(np.float16))
    np.testing.assert_array_equal(target.vars["fc/b"].numpy(), b.astype(np.float16))


def test_float32_weight_out_of_float16_range_is_refused_by_name(tmp_path):
    from kerastrainer.tfutils.checkpoint_read import CheckpointLoadError
    from kerastrainer.tfutils.sessinit import SmartInit
    from kerastrainer.tfutils.varmanip import save_chkpt_vars
    path = str(tmp_path / "ckpt")
    save_chkpt_vars({"fc/W": np.full((4, 4), 1e5, np.float32), "fc/b": np.zeros(4, np.float32)}, path)
    target = _Float16Target()
    with pytest.raises(CheckpointLoadError, match=r"variable 'fc/W': the value 100000.0 at index \(0, 0\) does "
                                                  r"not fit float16"):
        SmartInit(path).init(target)


# --- item 7: trainings in one process free what they made -------------------------------------------
def _train_and_forget(n):
    """``n`` trainings of a small ModelDesc; weak references to each one's model variables."""
    import gc
    import weakref

    from _models import MLP, LinearData
    from kerastrainer.train import SimpleTrainer, launch_train_with_config
    refs = []
    for _ in range(n):
        t = SimpleTrainer()
        launch_train_with_config(_quiet(model=MLP(), dataflow=LinearData(num_batches=2), max_epoch=1), t)
        refs.append([weakref.ref(v) for v in t.named_variables().values()])
        del t
    gc.collect()
    return refs


def _func_graphs():
    import gc

    import tensorflow as tf
    kind = type(tf.function(lambda: tf.constant(1)).get_concrete_function().graph)
    return sum(1 for o in gc.get_objects() if isinstance(o, kind))


def _check_trainings_are_freed(n):
    _train_and_forget(1)   # what the first training of a process creates for good (caches)
    graphs = _func_graphs()
    refs = _train_and_forget(n)
    alive = [r() for rs in refs for r in rs if r() is not None]
    # before: each training's 4 variables stayed alive (its traced graph, kept by the all-reduce
    # gradient TF registers globally at every trace, held them through `.variables` on the
    # layers' output tensors), and so did its graphs
    assert alive == [], f"{len(alive)} variables of {n} finished trainings are alive: {[v.name for v in alive[:4]]}"
    assert _func_graphs() <= graphs, "the traced graphs of finished trainings are kept"


def test_trainings_in_one_process_free_their_variables_and_graphs():
    _check_trainings_are_freed(3)


@pytest.mark.slow
def test_twenty_trainings_in_one_process_free_their_variables_and_graphs():
    _check_trainings_are_freed(20)


def test_output_tensor_variables_are_weak_but_readable():
    import tensorflow as tf

    from kerastrainer.models.registry import VariableHolder, _TensorVariables
    v = tf.Variable(1.0)
    h = _TensorVariables(W=v)
    assert isinstance(h, VariableHolder) and h.W is v and h.all() == [v]
    del v
    import gc
    gc.collect()
    with pytest.raises(ReferenceError, match="'W' of this layer no longer exists: the model that owned it was freed"):
        h.W
