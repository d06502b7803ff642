"""LMDBSerializer and NumpySerializer: round trips, shuffling, sizes and errors, on real files."""
import multiprocessing as mp
import os
import sys

import numpy as np
import pytest

from kerastrainer.dataflow import DataFromGenerator, DataFromList, LMDBSerializer, NumpySerializer, wire
from kerastrainer.dataflow import serialize


def sample_dps(n=12):
    return [[np.arange(6, dtype=np.float32).reshape(2, 3) + i, i, f"item{i}", np.ones(i % 3 + 1, np.int16)]
            for i in range(n)]


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if isinstance(x, np.ndarray):
            assert isinstance(y, np.ndarray) and x.dtype == y.dtype
            np.testing.assert_array_equal(x, y)
        elif isinstance(x, dict):
            assert x.keys() == y.keys()
            assert_same([x[k] for k in x], [y[k] for k in x])
        else:
            assert x == y and type(x) is type(y)


def first_items(ds):
    return [dp[1] for dp in ds]


# ------------------------------------------------------------------ LMDB

def test_lmdb_round_trip_in_order(tmp_path):
    path = str(tmp_path / "train.lmdb")
    dps = sample_dps()
    LMDBSerializer.save(DataFromList(dps, shuffle=False), path, write_frequency=5)
    assert os.listdir(tmp_path) == ["train.lmdb"]  # one file, no lock or temporary file left
    ds = LMDBSerializer.load(path, shuffle=False)
    assert len(ds) == 12  # known before reset_state
    ds.reset_state()
    out = list(ds)
    for a, b in zip(dps, out):
        assert_same(a, b)
    out[0][0][0, 0] = 99.0  # each datapoint has its own writable arrays
    assert list(ds)[0][0][0, 0] == 0.0


def test_lmdb_dict_datapoints_and_shuffle(tmp_path):
    path = tmp_path / "d.lmdb"  # a PathLike works too
    dps = [{"x": np.full(3, i, np.uint8), "id": i} for i in range(40)]
    LMDBSerializer.save(DataFromList(dps, shuffle=False), path)
    ds = LMDBSerializer.load(path, shuffle=True)
    ds.reset_state()
    a = [dp["id"] for dp in ds]
    b = [dp["id"] for dp in ds]
    assert sorted(a) == sorted(b) == list(range(40)) and a != b and a != list(range(40))
    assert all(int(dp["x"][0]) == dp["id"] for dp in ds)


def test_lmdb_map_grows_for_large_data(tmp_path, monkeypatch):
    monkeypatch.setattr(serialize, "_LMDB_INITIAL_MAP_SIZE", 64 * 1024)
    path = str(tmp_path / "big.lmdb")
    LMDBSerializer.save(DataFromList([[np.full(50_000, i, np.float32)] for i in range(20)], shuffle=False),
                        path, write_frequency=7)
    ds = LMDBSerializer.load(path, shuffle=False)
    ds.reset_state()
    assert [float(dp[0][-1]) for dp in ds] == [float(i) for i in range(20)]


def _child_reads(path, conn):
    ds = LMDBSerializer.load(path, shuffle=False)
    ds.reset_state()  # opens its own handle in this process
    conn.send([dp[1] for dp in ds])
    conn.close()


def _forked_reset_and_read(ds, conn):
    ds.reset_state()
    conn.send([dp[1] for dp in ds])
    conn.close()


def test_lmdb_in_worker_processes(tmp_path):
    path = str(tmp_path / "w.lmdb")
    LMDBSerializer.save(DataFromList(sample_dps(), shuffle=False), path)
    ds = LMDBSerializer.load(path, shuffle=False)
    ds.reset_state()
    itr = iter(ds)
    next(itr)  # the parent holds an open read transaction while the child works
    ctx = mp.get_context("fork")
    for target, arg in ((_forked_reset_and_read, ds), (_child_reads, path)):
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=target, args=(arg, send))
        proc.start()
        try:
            for _ in range(300):  # up to 30 s, but stop waiting as soon as the child dies
                if recv.poll(0.1) or not proc.is_alive():
                    break
            assert recv.poll(0.5), f"the worker sent nothing (exit code {proc.exitcode})"
            assert recv.recv() == list(range(12))
        finally:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join()
        assert proc.exitcode == 0
    assert first_items(itr) == list(range(1, 12))
    twin = LMDBSerializer.load(path, shuffle=False)  # a second DataFlow of the same file in this process
    twin.reset_state()
    assert first_items(twin) == list(range(12))
    twin.close()
    assert first_items(ds) == list(range(12))  # still open: the handle is shared and counted
    ds.close()


def test_lmdb_interrupted_save_leaves_nothing(tmp_path):
    def broken():
        yield [np.zeros(3)]
        raise RuntimeError("source failed")

    path = str(tmp_path / "x.lmdb")
    with pytest.raises(RuntimeError, match="source failed"):
        LMDBSerializer.save(DataFromGenerator(broken), path)
    assert os.listdir(tmp_path) == []


def test_lmdb_errors(tmp_path):
    missing = str(tmp_path / "missing.lmdb")
    with pytest.raises(FileNotFoundError, match="missing.lmdb"):
        LMDBSerializer.load(missing)
    path = str(tmp_path / "a.lmdb")
    LMDBSerializer.save(DataFromList([[1]]), path)
    with pytest.raises(FileExistsError, match="a.lmdb"):
        LMDBSerializer.save(DataFromList([[1]]), path)
    with pytest.raises(IsADirectoryError):
        LMDBSerializer.save(DataFromList([[1]]), str(tmp_path))
    with pytest.raises(TypeError, match="DataFromList"):
        LMDBSerializer.save([[1], [2]], str(tmp_path / "b.lmdb"))
    with pytest.raises(ValueError, match="write_frequency"):
        LMDBSerializer.save(DataFromList([[1]]), str(tmp_path / "b.lmdb"), write_frequency=0)
    junk = tmp_path / "junk.lmdb"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(ValueError, match="junk.lmdb"):
        LMDBSerializer.load(str(junk))


_READ_LMDB = """
import sys
from kerastrainer.dataflow import LMDBSerializer
try:
    ds = LMDBSerializer.load(sys.argv[1], shuffle=False)
    ds.reset_state()
    print("READ", sum(1 for _ in ds))
except Exception as e:
    print("ERROR", type(e).__name__, e)
"""


def _read_in_subprocess(path):
    import subprocess
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=repo + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", _READ_LMDB, path], capture_output=True, text=True, timeout=120,
                       env=env)
    assert p.returncode == 0, f"reading {path} ended with rc {p.returncode}: {p.stderr[-2000:]}"
    return p.stdout


@pytest.mark.parametrize("keep", [0, 100, 4096, 8192, 12288, "all-but-one-page"])
def test_truncated_lmdb_is_an_error_naming_the_file_not_a_signal(tmp_path, keep):
    path = str(tmp_path / "cut.lmdb")
    LMDBSerializer.save(DataFromList([[np.full(3000, i, np.float32)] for i in range(50)], shuffle=False), path)
    size = os.path.getsize(path)
    os.truncate(path, size - 4096 if keep == "all-but-one-page" else keep)
    out = _read_in_subprocess(path)   # unchecked, this was SIGBUS (rc 135) with no message
    assert "ERROR ValueError" in out and "cut.lmdb" in out, out
    assert "empty" in out if keep == 0 else "truncated" in out, out
    if keep != 0:
        return
    whole = str(tmp_path / "whole.lmdb")   # the check passes complete files
    LMDBSerializer.save(DataFromList([[1], [2]], shuffle=False), whole)
    assert "READ 2" in _read_in_subprocess(whole)


def test_garbage_inside_an_lmdb_file_names_the_file(tmp_path):
    path = str(tmp_path / "garbled.lmdb")
    LMDBSerializer.save(DataFromList([[np.full(8, i, np.float32), "x" * i] for i in range(600)],
                                     shuffle=False), path)
    data = bytearray(open(path, "rb").read())
    rng = np.random.RandomState(0)
    for page in range(2, len(data) // 4096):   # every page but the meta pages
        data[page * 4096 + 16:page * 4096 + 116] = rng.randint(0, 256, 100).astype(np.uint8).tobytes()
    open(path, "wb").write(bytes(data))
    out = _read_in_subprocess(path)
    assert "ERROR" in out and "garbled.lmdb" in out and "damaged" in out, out


def test_lmdb_without_keys_entry_uses_all_keys(tmp_path):
    import lmdb
    path = str(tmp_path / "plain.lmdb")
    env = lmdb.open(path, subdir=False, lock=False, map_size=1 << 20)
    with env.begin(write=True) as txn:
        for i in (2, 0, 1):
            txn.put(b"k%d" % i, wire.dumps([i]))
    env.close()
    ds = LMDBSerializer.load(path, shuffle=False)
    ds.reset_state()
    assert list(ds) == [[0], [1], [2]]


def test_lmdb_missing_package_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "lmdb", None)  # makes `import lmdb` fail
    with pytest.raises(ImportError, match=r"kerastrainer\[lmdb\]"):
        LMDBSerializer.save(DataFromList([[1]]), str(tmp_path / "a.lmdb"))


# ------------------------------------------------------------------ numpy

def test_numpy_round_trip_keeps_types(tmp_path):
    path = str(tmp_path / "data.npz")
    dps = [[np.full((2, 2), i, np.float32), i, np.int16(-i), i * 0.5, f"s{i}", np.arange(i + 1), i % 2 == 0]
           for i in range(10)]
    NumpySerializer.save(DataFromList(dps, shuffle=False), path)
    ds = NumpySerializer.load(path, shuffle=False)
    assert len(ds) == 10
    ds.reset_state()
    out = list(ds)
    for a, b in zip(dps, out):
        assert_same(a, b)
    assert out[3][0].shape == (2, 2) and out[3][2].dtype == np.int16
    with pytest.raises(ValueError, match="read-only"):
        out[0][0][0, 0] = 5.0  # views into the loaded data: editing them would change later epochs
    plain = np.load(path)  # stacked components are plain arrays
    assert plain["c0"].shape == (10, 2, 2) and plain["c1"].tolist() == list(range(10))


def test_numpy_dict_datapoints_shuffle_and_exact_path(tmp_path):
    path = str(tmp_path / "val.data")  # no .npz suffix is added
    dps = [{"img": np.full(3, i, np.uint8), "label": i} for i in range(30)]
    NumpySerializer.save(DataFromList(dps, shuffle=False), path)
    assert os.listdir(tmp_path) == ["val.data"]
    ds = NumpySerializer.load(path)
    ds.reset_state()
    a = [dp["label"] for dp in ds]
    b = [dp["label"] for dp in ds]
    assert sorted(a) == sorted(b) == list(range(30)) and a != b
    assert all(int(dp["img"][0]) == dp["label"] for dp in ds)


def test_numpy_empty_dataflow(tmp_path):
    path = str(tmp_path / "empty.npz")
    NumpySerializer.save(DataFromList([]), path)
    ds = NumpySerializer.load(path)
    ds.reset_state()
    assert len(ds) == 0 and list(ds) == []


def test_numpy_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.npz"):
        NumpySerializer.load(str(tmp_path / "nope.npz"))
    path = str(tmp_path / "a.npz")
    NumpySerializer.save(DataFromList([[1]]), path)
    with pytest.raises(FileExistsError, match="a.npz"):
        NumpySerializer.save(DataFromList([[1]]), path)
    other = str(tmp_path / "other.npz")
    np.savez(other, x=np.zeros(3))
    with pytest.raises(ValueError, match="not written by NumpySerializer"):
        NumpySerializer.load(other)
    text = tmp_path / "text.npz"
    text.write_text("hello")
    with pytest.raises(ValueError, match="text.npz"):
        NumpySerializer.load(str(text))
    with pytest.raises(ValueError, match="datapoint 1 is not a list of 2"):
        NumpySerializer.save(DataFromList([[1, 2], [3]], shuffle=False), str(tmp_path / "b.npz"))
    with pytest.raises(TypeError, match="str keys"):
        NumpySerializer.save(DataFromList([{1: 2}]), str(tmp_path / "c.npz"))
    with pytest.raises(TypeError, match="component 0"):
        NumpySerializer.save(DataFromList([[object()]]), str(tmp_path / "d.npz"))
    assert sorted(os.listdir(tmp_path)) == ["a.npz", "other.npz", "text.npz"]


# ------------------------------------------------------------------ HDF5 / TFRecord

def test_hdf5_round_trip_shuffle_and_str(tmp_path):
    pytest.importorskip("h5py")
    from kerastrainer.dataflow import HDF5Serializer
    path = str(tmp_path / "d.h5")
    dps = [[i, np.full((3, 2), i, np.float32), f"name{i}", i % 2 == 0] for i in range(20)]
    HDF5Serializer.save(DataFromList(dps, shuffle=False), path, ["label", "img", "name", "even"])
    ds = HDF5Serializer.load(path, ["label", "img", "name", "even"], shuffle=False)
    ds.reset_state()
    assert len(ds) == 20
    got = list(ds)
    assert [int(d[0]) for d in got] == list(range(20))
    assert all(d[1].shape == (3, 2) and d[1].dtype == np.float32 and (d[1] == d[0]).all() for d in got)
    assert [d[2] for d in got] == [f"name{i}" for i in range(20)] and bool(got[2][3]) is True
    # a subset of the datasets, in another order, shuffled
    ds = HDF5Serializer.load(path, ["img", "label"], shuffle=True)
    ds.reset_state()
    order = [int(d[1]) for d in ds]
    assert sorted(order) == list(range(20)) and order != list(range(20))


def test_hdf5_numbers_are_mapped_read_only_and_other_layouts_are_read(tmp_path):
    h5py = pytest.importorskip("h5py")
    import mmap
    from kerastrainer.dataflow import HDF5Serializer
    path = str(tmp_path / "d.h5")
    dps = [[np.full((4, 3), i, np.int16), np.float64(i) / 3, f"n{i}"] for i in range(50)]
    HDF5Serializer.save(DataFromList(dps, shuffle=False), path, ["img", "x", "name"])
    ds = HDF5Serializer.load(path, ["img", "x", "name"], shuffle=False)
    ds.reset_state()
    got = list(ds)
    assert [(d[0] == i).all() and d[0].dtype == np.int16 and d[1] == np.float64(i) / 3 and d[2] == f"n{i}"
            for i, d in enumerate(got)] == [True] * 50
    base = got[7][0]
    while isinstance(base, (np.ndarray, memoryview)):
        base = base.obj if isinstance(base, memoryview) else base.base
    assert isinstance(base, mmap.mmap)   # numbers come from the file's pages, not a copy
    with pytest.raises(ValueError, match="read-only"):
        got[7][0][0, 0] = 1
    # datasets another program wrote chunked and compressed are read by h5py (no checksums to check)
    other = str(tmp_path / "other.h5")
    with h5py.File(other, "w") as hf:
        hf.create_dataset("img", data=np.arange(60).reshape(20, 3), chunks=(4, 3), compression="gzip")
    ds = HDF5Serializer.load(other, ["img"], shuffle=True)
    ds.reset_state()
    assert sorted(int(d[0][0]) for d in ds) == list(range(0, 60, 3))


def test_hdf5_errors_are_clear(tmp_path):
    pytest.importorskip("h5py")
    from kerastrainer.dataflow import HDF5Serializer
    path = str(tmp_path / "d.h5")
    with pytest.raises(ValueError, match="datapoint 0 has 2 components"):
        HDF5Serializer.save(DataFromList([[1, 2]], shuffle=False), path, ["a"])
    with pytest.raises(ValueError, match="different shapes"):
        HDF5Serializer.save(DataFromList([[np.zeros(2)], [np.zeros(3)]], shuffle=False), path, ["a"])
    with pytest.raises(TypeError, match="data_paths"):
        HDF5Serializer.save(DataFromList([[1]], shuffle=False), path, "a")
    assert not os.path.exists(path)
    HDF5Serializer.save(DataFromList([[1, 2.0]], shuffle=False), path, ["a", "b"])
    with pytest.raises(FileExistsError):
        HDF5Serializer.save(DataFromList([[1, 2.0]], shuffle=False), path, ["a", "b"])
    with pytest.raises(KeyError, match=r"no dataset 'c'.*\['a', 'b'\]"):
        HDF5Serializer.load(path, ["a", "c"])
    cut = str(tmp_path / "cut.h5")
    open(cut, "wb").write(open(path, "rb").read()[:300])
    with pytest.raises(ValueError, match="cut.h5"):
        HDF5Serializer.load(cut, ["a"])


def test_tfrecord_round_trip_with_and_without_size(tmp_path):
    from kerastrainer.dataflow import TFRecordSerializer
    path = str(tmp_path / "d.tfrecord")
    dps = sample_dps(10)
    TFRecordSerializer.save(DataFromList(dps, shuffle=False), path)
    ds = TFRecordSerializer.load(path)
    ds.reset_state()
    with pytest.raises(NotImplementedError, match="size="):
        len(ds)
    got = list(ds)
    assert len(got) == 10
    for a, b in zip(dps, got):
        assert_same(a, b)
    sized = TFRecordSerializer.load(path, size=4)
    sized.reset_state()
    assert len(sized) == 4 and [first_items(sized) for _ in range(3)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]]
    cut = str(tmp_path / "cut.tfrecord")
    open(cut, "wb").write(open(path, "rb").read()[:-7])
    ds = TFRecordSerializer.load(cut)
    ds.reset_state()
    with pytest.raises(ValueError, match="cut.tfrecord.*damaged after record 9"):
        list(ds)
