"""SVHNDigit and Caltech101Silhouettes on tiny real MATLAB files written with scipy in tmp dirs."""
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

sio = pytest.importorskip("scipy.io")

from kerastrainer.dataflow import (AugmentImageComponent, BatchData, MultiProcessRunner,  # noqa: E402
                                   RandomMixData, dataset, imgaug)
from kerastrainer.dataflow.dataset import DatasetFilesNotFound  # noqa: E402
from kerastrainer.dataflow.dataset import files as files_mod  # noqa: E402


# ---------------------------------------------------------------- SVHN

def _svhn_arrays(n, seed=0):
    r = np.random.RandomState(seed)
    x = r.randint(0, 256, (32, 32, 3, n)).astype(np.uint8)
    y = (np.arange(n) % 10 + 1).astype(np.uint8).reshape(n, 1)  # 1..10, 10 is digit 0
    return x, y


def _write_svhn(d, name, n, seed=0, **override):
    x, y = _svhn_arrays(n, seed)
    d.mkdir(parents=True, exist_ok=True)
    mdict = {"X": x, "y": y}
    mdict.update(override)
    sio.savemat(str(d / f"{name}_32x32.mat"), {k: v for k, v in mdict.items() if v is not None})
    return x, y


@pytest.fixture
def svhn_dir(tmp_path):
    d = tmp_path / "svhn"
    arrays = {name: _write_svhn(d, name, n, seed=i) for i, (name, n) in
              enumerate((("train", 23), ("test", 11), ("extra", 7)))}
    return d, arrays


def test_svhn_datapoints_and_label_mapping(svhn_dir):
    d, arrays = svhn_dir
    x, y = arrays["train"]
    ds = dataset.SVHNDigit("train", data_dir=str(d), shuffle=False)
    ds.reset_state()
    dps = list(ds)
    assert len(ds) == ds.size() == len(dps) == 23
    for k, (img, label) in enumerate(dps):
        assert img.shape == (32, 32, 3) and img.dtype == np.uint8
        np.testing.assert_array_equal(img, x[:, :, :, k])  # MATLAB HWCN -> one HWC image
        assert isinstance(label, int) and label == y[k, 0] % 10  # 10 -> 0, others unchanged
    assert sorted({dp[1] for dp in dps}) == list(range(10))
    assert ds.X.shape == (23, 32, 32, 3) and ds.Y.dtype == np.int64


def test_svhn_shuffle_flag(svhn_dir):
    d, _ = svhn_dir
    plain = dataset.SVHNDigit("train", data_dir=str(d), shuffle=False)
    plain.reset_state()
    mixed = dataset.SVHNDigit("train", str(d))  # tensorpack's positional order: name, data_dir, shuffle
    assert mixed.shuffle is True
    mixed.reset_state()
    order = [dp[0].tobytes() for dp in plain]
    shuffled = [dp[0].tobytes() for dp in mixed]
    assert sorted(order) == sorted(shuffled) and order != shuffled


def test_svhn_splits_default_dir_and_shared_arrays(svhn_dir, monkeypatch):
    d, arrays = svhn_dir
    root = d.parent
    (root / "svhn_data").symlink_to(d, target_is_directory=True)
    monkeypatch.setenv("KERASTRAINER_DATASET", str(root))
    sizes = {name: len(dataset.SVHNDigit(name)) for name in ("train", "test", "extra")}
    assert sizes == {"train": 23, "test": 11, "extra": 7}
    a, b = dataset.SVHNDigit("test"), dataset.SVHNDigit("test", shuffle=False)
    assert a.X is b.X  # read once, as tensorpack's cache does
    # datapoints are copies: augmenting one in place never changes the shared arrays
    b.reset_state()
    img, _ = next(iter(b))
    img[:] = 0
    np.testing.assert_array_equal(b.X[0], arrays["test"][0][:, :, :, 0])
    # a replaced file is read again
    _write_svhn(d, "test", 4, seed=9)
    os.utime(d / "test_32x32.mat", ns=(1, 1))
    assert len(dataset.SVHNDigit("test")) == 4


def test_svhn_per_pixel_mean(svhn_dir, monkeypatch):
    d, arrays = svhn_dir
    want = np.concatenate([arrays[n][0] for n in ("train", "test", "extra")], axis=3).mean(axis=3)
    ds = dataset.SVHNDigit("test", data_dir=str(d))
    got = ds.get_per_pixel_mean()  # on a reader: its own folder
    assert got.shape == (32, 32, 3) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5)
    monkeypatch.setenv("KERASTRAINER_DATASET", str(d.parent))
    (d.parent / "svhn_data").symlink_to(d, target_is_directory=True)
    got = dataset.SVHNDigit.get_per_pixel_mean(("train",))  # tensorpack's static form
    np.testing.assert_allclose(got, arrays["train"][0].mean(axis=3), rtol=1e-5)
    with pytest.raises(ValueError, match="'train', 'test', 'extra'"):
        dataset.SVHNDigit.get_per_pixel_mean(("val",))


def test_svhn_missing_file_and_bad_name(tmp_path):
    with pytest.raises(DatasetFilesNotFound) as ei:
        dataset.SVHNDigit("extra", data_dir=str(tmp_path))
    msg = str(ei.value)
    assert str(tmp_path) in msg and "extra_32x32.mat" in msg and "download=True" in msg
    with pytest.raises(ValueError, match="'train', 'test', 'extra'"):
        dataset.SVHNDigit("validation", data_dir=str(tmp_path))


def test_svhn_download_fetches_the_split_file(tmp_path, monkeypatch):
    urls = []

    def fake_download(url, dest_dir):
        urls.append(url)
        _write_svhn(tmp_path / "dl", "test", 3)
        return os.path.join(dest_dir, os.path.basename(url))

    monkeypatch.setattr(files_mod, "download", fake_download)
    ds = dataset.SVHNDigit("test", data_dir=str(tmp_path / "dl"), download=True)
    assert urls == ["http://ufldl.stanford.edu/housenumbers/test_32x32.mat"] and len(ds) == 3


@pytest.mark.parametrize("override, match", [
    ({"y": None}, r"has no variable\(s\) \['y'\] \(it has \['X'\]\)"),
    ({"X": np.zeros((28, 28, 3, 5), np.uint8)}, r"expected 'X' of shape \(32, 32, 3, N\), got \(28, 28, 3, 5\)"),
    ({"X": np.zeros((32, 32, 3), np.uint8)}, r"expected 'X' of shape \(32, 32, 3, N\)"),
    ({"y": np.ones((4, 1), np.uint8)}, r"expected 'y' of shape \(5, 1\) to match the 5 images"),
    ({"y": np.full((5, 1), 11, np.uint8)}, r"labels in 1..10"),
    ({"X": np.full((32, 32, 3, 5), 300.0)}, r"outside \[0, 255\]"),
])
def test_svhn_bad_contents_name_the_file(tmp_path, override, match):
    _write_svhn(tmp_path, "train", 5, **override)
    with pytest.raises(ValueError, match=match) as ei:
        dataset.SVHNDigit("train", data_dir=str(tmp_path))
    assert str(tmp_path / "train_32x32.mat") in str(ei.value)


def test_svhn_float_pixels_in_range_are_accepted(tmp_path):
    x, _ = _write_svhn(tmp_path, "train", 5, X=_svhn_arrays(5)[0].astype(np.float64))
    ds = dataset.SVHNDigit("train", data_dir=str(tmp_path), shuffle=False)
    assert ds.X.dtype == np.uint8
    np.testing.assert_array_equal(ds.X[2], x[:, :, :, 2])


def test_svhn_unreadable_files_name_the_file(tmp_path):
    p = tmp_path / "train_32x32.mat"
    for content in (b"not a mat file" * 20, b""):
        p.write_bytes(content)
        with pytest.raises(ValueError, match="not a readable MATLAB .mat file") as ei:
            dataset.SVHNDigit("train", data_dir=str(tmp_path))
        assert str(p) in str(ei.value)
    _write_svhn(tmp_path, "train", 5)
    raw = p.read_bytes()
    p.write_bytes(raw[:len(raw) // 2])
    with pytest.raises(ValueError, match="not a readable MATLAB .mat file"):
        dataset.SVHNDigit("train", data_dir=str(tmp_path))
    # a v7.3 (HDF5-based) file: scipy cannot read it, and the message says so
    header = b"MATLAB 7.3 MAT-file".ljust(116, b" ") + b"\0" * 8 + struct.pack("<H", 0x0200) + b"IM"
    p.write_bytes(header + b"\0" * 512)
    with pytest.raises(ValueError, match="v7.3"):
        dataset.SVHNDigit("train", data_dir=str(tmp_path))


def test_without_scipy_the_error_names_the_extra(svhn_dir, monkeypatch):
    d, _ = svhn_dir  # fresh files: nothing of them is cached yet
    _write_caltech(d)
    for mod in ("scipy", "scipy.io"):
        monkeypatch.setitem(sys.modules, mod, None)  # makes `import scipy.io` raise ImportError
    with pytest.raises(ImportError, match=r"pip install kerastrainer\[mat\]"):
        dataset.SVHNDigit("train", data_dir=str(d))
    with pytest.raises(ImportError, match=r"pip install kerastrainer\[mat\]"):
        dataset.Caltech101Silhouettes("train", dir=str(d))


def test_dataset_package_imports_without_scipy():
    code = "import sys, kerastrainer.dataflow.dataset as d; d.SVHNDigit; print('scipy' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "False", r.stderr[-2000:]


def test_svhn_example_pipeline(svhn_dir):
    """tensorpack's svhn-digit-convnet get_data(), on the tiny files."""
    d, _ = svhn_dir
    train = RandomMixData([dataset.SVHNDigit("train", str(d)), dataset.SVHNDigit("extra", str(d))])
    assert len(train) == 30
    train = AugmentImageComponent(train, [imgaug.Resize((40, 40)), imgaug.Brightness(30),
                                          imgaug.Contrast((0.5, 1.5))])
    train = MultiProcessRunner(BatchData(train, 8), 2, 2)
    train.reset_state()
    assert len(train) == 3
    for _ in range(2):  # two epochs of len(train) batches, as tensorpack's runner gives
        batches = list(train)
        assert len(batches) == 3
        for images, labels in batches:
            assert images.shape == (8, 40, 40, 3) and images.dtype == np.uint8
            assert labels.shape == (8,) and labels.min() >= 0 and labels.max() <= 9
    train.close()

    test = AugmentImageComponent(dataset.SVHNDigit("test", str(d), shuffle=False), [imgaug.Resize((40, 40))])
    test = BatchData(test, 8, remainder=True)
    test.reset_state()
    batches = list(test)
    assert len(test) == len(batches) == 2 and [len(b[1]) for b in batches] == [8, 3]
    assert list(np.concatenate([b[1] for b in batches])) == [(k % 10 + 1) % 10 for k in range(11)]


# ---------------------------------------------------------------- Caltech 101 Silhouettes

_CALTECH_SIZES = {"train": 12, "test": 5, "val": 4}


def _write_caltech(d, **override):
    r = np.random.RandomState(0)
    mdict = {}
    for i, (name, n) in enumerate(_CALTECH_SIZES.items()):
        mdict[f"{name}_data"] = (r.rand(n, 784) > 0.5).astype(np.float64)
        mdict[f"{name}_labels"] = ((np.arange(n) * 9 + i) % 101 + 1).astype(np.uint8).reshape(n, 1)
    mdict.update(override)
    d.mkdir(parents=True, exist_ok=True)
    sio.savemat(str(d / "caltech101_silhouettes_28_split1.mat"), {k: v for k, v in mdict.items() if v is not None})
    return mdict


def test_caltech_datapoints_all_splits(tmp_path):
    mdict = _write_caltech(tmp_path)
    for name, n in _CALTECH_SIZES.items():
        ds = dataset.Caltech101Silhouettes(name, shuffle=False, dir=str(tmp_path))
        ds.reset_state()
        dps = list(ds)
        assert len(ds) == ds.size() == len(dps) == n
        for k, (img, label) in enumerate(dps):
            assert img.shape == (28, 28) and img.dtype == np.float32
            np.testing.assert_array_equal(img, mdict[f"{name}_data"][k].reshape(28, 28))  # row by row
            assert isinstance(label, int) and label == mdict[f"{name}_labels"][k, 0] - 1
        assert min(dp[1] for dp in dps) >= 0 and max(dp[1] for dp in dps) <= 100


def test_caltech_shuffle_and_default_dir(tmp_path, monkeypatch):
    _write_caltech(tmp_path / "caltech101_data")
    monkeypatch.setenv("KERASTRAINER_DATASET", str(tmp_path))
    ds = dataset.Caltech101Silhouettes("train")  # tensorpack's defaults: shuffle=True, dir from the env
    ds.reset_state()
    plain = dataset.Caltech101Silhouettes("train", False)
    plain.reset_state()
    a, b = [dp[1] for dp in ds], [dp[1] for dp in plain]
    assert sorted(a) == sorted(b) and a != b


def test_caltech_errors_name_the_file(tmp_path):
    with pytest.raises(DatasetFilesNotFound) as ei:
        dataset.Caltech101Silhouettes("train", dir=str(tmp_path))
    msg = str(ei.value)
    assert str(tmp_path) in msg and "caltech101_silhouettes_28_split1.mat" in msg and "download=True" in msg
    with pytest.raises(ValueError, match="'train', 'test' or 'val'"):
        dataset.Caltech101Silhouettes("extra", dir=str(tmp_path))
    path = str(tmp_path / "caltech101_silhouettes_28_split1.mat")
    cases = [
        ({"val_labels": None}, "val", r"has no variable\(s\) \['val_labels'\]"),
        ({"train_data": np.zeros((12, 28, 28))}, "train", r"expected 'train_data' of shape \(N, 784\)"),
        ({"test_labels": np.ones((3, 1))}, "test", r"expected 'test_labels' of shape \(5, 1\)"),
        ({"test_labels": np.zeros((5, 1))}, "test", r"labels in 1..101"),
        ({"train_data": np.full((12, 784), 255.0)}, "train", r"outside \[0, 1\]"),
    ]
    for override, split, match in cases:
        _write_caltech(tmp_path, **override)
        with pytest.raises(ValueError, match=match) as ei:
            dataset.Caltech101Silhouettes(split, dir=str(tmp_path))
        assert path in str(ei.value)
    # only the asked split is checked: a broken 'val' does not stop 'train'
    _write_caltech(tmp_path, val_labels=None)
    assert len(dataset.Caltech101Silhouettes("train", dir=str(tmp_path))) == 12


def test_caltech_download_fetches_the_file(tmp_path, monkeypatch):
    urls = []

    def fake_download(url, dest_dir):
        urls.append(url)
        _write_caltech(tmp_path)
        return os.path.join(dest_dir, os.path.basename(url))

    monkeypatch.setattr(files_mod, "download", fake_download)
    ds = dataset.Caltech101Silhouettes("val", dir=str(tmp_path), download=True)
    assert urls == ["https://people.cs.umass.edu/~marlin/data/caltech101_silhouettes_28_split1.mat"]
    assert len(ds) == 4
