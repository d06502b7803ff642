"""Dataset readers on tiny real files in their standard formats, made in tmp dirs."""
import gzip
import os
import pickle
import struct
import tarfile

import numpy as np
import pytest

from kerastrainer.dataflow import dataset
from kerastrainer.dataflow.dataset import DatasetFilesNotFound


# ---------------------------------------------------------------- MNIST (IDX)

def _write_idx(path, images, labels, gz):
    img_bytes = struct.pack(">IIII", 2051, len(images), 28, 28) + images.tobytes()
    lbl_bytes = struct.pack(">II", 2049, len(labels)) + labels.tobytes()
    op = gzip.open if gz else open
    with op(path[0] + (".gz" if gz else ""), "wb") as f:
        f.write(img_bytes)
    with op(path[1] + (".gz" if gz else ""), "wb") as f:
        f.write(lbl_bytes)


@pytest.fixture
def mnist_dir(tmp_path):
    r = np.random.RandomState(0)
    d = tmp_path / "mnist"
    d.mkdir()
    train = r.randint(0, 256, (7, 28, 28)).astype(np.uint8)
    test = r.randint(0, 256, (3, 28, 28)).astype(np.uint8)
    _write_idx((str(d / "train-images-idx3-ubyte"), str(d / "train-labels-idx1-ubyte")),
               train, np.arange(7, dtype=np.uint8), gz=False)
    _write_idx((str(d / "t10k-images-idx3-ubyte"), str(d / "t10k-labels-idx1-ubyte")),
               test, np.array([9, 8, 7], np.uint8), gz=True)
    return d, train, test


def test_mnist_plain_and_gz(mnist_dir):
    d, train, test = mnist_dir
    ds = dataset.Mnist("train", shuffle=False, dir=str(d))
    ds.reset_state()
    dps = list(ds)
    assert len(ds) == len(dps) == 7
    img, label = dps[3]
    assert img.shape == (28, 28) and img.dtype == np.float32 and label == 3 and isinstance(label, int)
    np.testing.assert_allclose(img, train[3] / 255.0, rtol=1e-6)
    assert 0.0 <= img.min() and img.max() <= 1.0
    ts = dataset.FashionMnist("test", shuffle=False, dir=str(d))
    ts.reset_state()
    assert [dp[1] for dp in ts] == [9, 8, 7]


def test_mnist_shuffle_is_a_permutation(mnist_dir):
    d, _, _ = mnist_dir
    ds = dataset.Mnist("train", shuffle=True, dir=str(d))
    ds.reset_state()
    labels = [dp[1] for dp in ds]
    assert sorted(labels) == list(range(7))


def test_mnist_missing_files_message(tmp_path):
    with pytest.raises(DatasetFilesNotFound) as ei:
        dataset.Mnist("train", dir=str(tmp_path))
    msg = str(ei.value)
    assert str(tmp_path) in msg and "train-images-idx3-ubyte" in msg and "download=True" in msg
    with pytest.raises(ValueError, match="'train' or 'test'"):
        dataset.Mnist("validation", dir=str(tmp_path))


def test_mnist_bad_magic_and_truncation(mnist_dir):
    d, _, _ = mnist_dir
    p = d / "train-images-idx3-ubyte"
    raw = p.read_bytes()
    p.write_bytes(struct.pack(">I", 1234) + raw[4:])
    with pytest.raises(ValueError, match="magic number 1234"):
        dataset.Mnist("train", dir=str(d))
    p.write_bytes(raw[:-100])
    with pytest.raises(ValueError, match="truncated"):
        dataset.Mnist("train", dir=str(d))
    (d / "t10k-images-idx3-ubyte.gz").write_bytes(b"not gzip at all")
    with pytest.raises(ValueError, match="gzip"):
        dataset.Mnist("test", dir=str(d))


def test_mnist_count_mismatch(mnist_dir):
    d, _, _ = mnist_dir
    (d / "train-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, 2) + b"\x00\x01")
    with pytest.raises(ValueError, match="7 images but .* 2 labels"):
        dataset.Mnist("train", dir=str(d))


def test_mnist_download_from_url(mnist_dir, tmp_path):
    src, _, _ = mnist_dir
    # The source serves gzipped files, as the real mirror does.
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"):
        with open(src / name, "rb") as f, gzip.open(src / (name + ".gz"), "wb") as g:
            g.write(f.read())

    class LocalMnist(dataset.Mnist):
        URL = (src.as_uri() + "/")

    dest = tmp_path / "fetched"
    ds = LocalMnist("train", dir=str(dest), download=True)
    assert len(ds) == 7
    assert sorted(os.listdir(dest)) == ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"]


# ---------------------------------------------------------------- CIFAR (pickles)

def _cifar_batch(n, seed, label_keys):
    r = np.random.RandomState(seed)
    d = {b"data": r.randint(0, 256, (n, 3072)).astype(np.uint8)}
    for k, num in label_keys.items():
        d[k] = [int(v) for v in r.randint(0, num, n)]
    return d


def _dump(obj, path):
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


@pytest.fixture
def cifar10_root(tmp_path):
    root = tmp_path / "cifar10"
    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True)
    for i in range(1, 6):
        _dump(_cifar_batch(4, i, {b"labels": 10}), d / f"data_batch_{i}")
    _dump(_cifar_batch(3, 9, {b"labels": 10}), d / "test_batch")
    _dump({b"label_names": [f"class{i}".encode() for i in range(10)]}, d / "batches.meta")
    return root


def test_cifar10_layout_and_values(cifar10_root):
    ds = dataset.Cifar10("train", shuffle=False, dir=str(cifar10_root))
    ds.reset_state()
    dps = list(ds)
    assert len(dps) == len(ds) == 20
    img, label = dps[0]
    assert img.shape == (32, 32, 3) and img.dtype == np.uint8 and isinstance(label, int)
    raw = _cifar_batch(4, 1, {b"labels": 10})
    row = raw[b"data"][0]
    # first 1024 bytes are the red plane, row-major
    assert img[0, 1, 0] == row[1] and img[1, 0, 1] == row[1024 + 32] and img[2, 3, 2] == row[2048 + 67]
    assert label == raw[b"labels"][0]
    assert dataset.Cifar10("test", dir=str(cifar10_root / "cifar-10-batches-py")).__len__() == 3
    assert ds.get_label_names()[3] == "class3"


def test_cifar_means(cifar10_root):
    ds = dataset.Cifar10("train", dir=str(cifar10_root))
    all_imgs = np.concatenate([dataset.Cifar10("train", dir=str(cifar10_root)).images,
                               dataset.Cifar10("test", dir=str(cifar10_root)).images]).astype(np.float64)
    pp = ds.get_per_pixel_mean()
    assert pp.shape == (32, 32, 3) and pp.dtype == np.float32
    np.testing.assert_allclose(pp, all_imgs.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(ds.get_per_channel_mean(), all_imgs.mean(axis=(0, 1, 2)), rtol=1e-5)
    np.testing.assert_allclose(ds.get_per_pixel_mean(("train",)), ds.images.mean(axis=0), rtol=1e-5)


def test_cifar100_fine_and_coarse(tmp_path):
    d = tmp_path / "c100" / "cifar-100-python"
    d.mkdir(parents=True)
    keys = {b"fine_labels": 100, b"coarse_labels": 20}
    _dump(_cifar_batch(5, 1, keys), d / "train")
    _dump(_cifar_batch(2, 2, keys), d / "test")
    fine = dataset.Cifar100("train", shuffle=False, dir=str(tmp_path / "c100"))
    coarse = dataset.Cifar100("train", shuffle=False, dir=str(tmp_path / "c100"), fine_label=False)
    fine.reset_state()
    coarse.reset_state()
    raw = _cifar_batch(5, 1, keys)
    assert [dp[1] for dp in fine] == raw[b"fine_labels"]
    assert [dp[1] for dp in coarse] == raw[b"coarse_labels"]


def test_cifar_errors(cifar10_root, tmp_path):
    with pytest.raises(DatasetFilesNotFound, match="data_batch_1"):
        dataset.Cifar10("train", dir=str(tmp_path / "nowhere"))
    d = cifar10_root / "cifar-10-batches-py"
    _dump({b"data": np.zeros((2, 3072), np.uint8)}, d / "test_batch")
    with pytest.raises(ValueError, match="no 'labels' entry"):
        dataset.Cifar10("test", dir=str(cifar10_root))
    (d / "test_batch").write_bytes(b"\x80\x02garbage")
    with pytest.raises(ValueError, match="test_batch"):
        dataset.Cifar10("test", dir=str(cifar10_root))
    # A pickle that would run code is refused, not executed.
    with open(d / "test_batch", "wb") as f:
        pickle.dump({b"data": os.getcwd, b"labels": []}, f)
    with pytest.raises(ValueError, match="not allowed"):
        dataset.Cifar10("test", dir=str(cifar10_root))


def test_cifar_download_and_extract(cifar10_root, tmp_path):
    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(cifar10_root / "cifar-10-batches-py", arcname="cifar-10-batches-py")

    class LocalCifar10(dataset.Cifar10):
        URL = archive.as_uri()

    ds = LocalCifar10("test", dir=str(tmp_path / "fresh"), download=True)
    assert len(ds) == 3


# ---------------------------------------------------------------- ILSVRC12

WNIDS = ["n01440764", "n01443537", "n01484850"]


def _jpeg(path, value):
    import cv2
    img = np.full((12, 16, 3), value, np.uint8)
    img[:, :, 0] = 250  # blue channel in BGR
    assert cv2.imwrite(str(path), img)


@pytest.fixture
def ilsvrc(tmp_path):
    pytest.importorskip("cv2")
    meta = tmp_path / "meta"
    meta.mkdir()
    (meta / "synsets.txt").write_text("\n".join(WNIDS) + "\n")
    (meta / "synset_words.txt").write_text("n01440764 tench, Tinca tinca\nn01443537 goldfish\n"
                                           "n01484850 great white shark\n")
    root = tmp_path / "imagenet"
    for label, wnid in enumerate(WNIDS[:2]):
        (root / "train" / wnid).mkdir(parents=True)
        for i in range(2):
            _jpeg(root / "train" / wnid / f"{wnid}_{i}.JPEG", 10 * label)
    (root / "val").mkdir()
    val_labels = [2, 0, 1]
    for i, lab in enumerate(val_labels):
        _jpeg(root / "val" / f"ILSVRC2012_val_{i:08d}.JPEG", 40 + lab)
    (meta / "val.txt").write_text("".join(f"ILSVRC2012_val_{i:08d}.JPEG {lab}\n"
                                          for i, lab in enumerate(val_labels)))
    (root / "test").mkdir()
    for i in range(2):
        _jpeg(root / "test" / f"ILSVRC2012_test_{i:08d}.JPEG", 5)
    return root, meta, val_labels


def test_ilsvrc_meta(ilsvrc):
    _, meta, val_labels = ilsvrc
    m = dataset.ILSVRCMeta(str(meta))
    assert m.get_synset_1000() == dict(enumerate(WNIDS))
    assert m.get_synset_words_1000()[1] == "n01443537 goldfish"
    assert [lab for _, lab in m.get_image_list("val")] == val_labels
    assert m.get_image_list("val", "train")[0] == (os.path.join(WNIDS[2], "ILSVRC2012_val_00000000.JPEG"), 2)
    with pytest.raises(DatasetFilesNotFound, match="train.txt"):
        m.get_image_list("train")
    with pytest.raises(DatasetFilesNotFound, match="synsets.txt"):
        dataset.ILSVRCMeta(str(meta / "empty")).get_synset_1000()


def test_ilsvrc_train_listed_from_directory(ilsvrc):
    root, meta, _ = ilsvrc
    ds = dataset.ILSVRC12Files(str(root), "train", meta_dir=str(meta))
    assert ds.shuffle and len(ds) == 4
    ds.reset_state()
    dps = sorted(ds)
    assert dps[0] == [str(root / "train" / WNIDS[0] / f"{WNIDS[0]}_0.JPEG"), 0]
    assert [lab for _, lab in dps] == [0, 0, 1, 1]


def test_ilsvrc_decodes_bgr(ilsvrc):
    root, meta, val_labels = ilsvrc
    ds = dataset.ILSVRC12(str(root), "val", meta_dir=str(meta))
    assert not ds.shuffle and ds.dir_structure == "original"
    ds.reset_state()
    dps = list(ds)
    assert [lab for _, lab in dps] == val_labels
    img = dps[0][0]
    assert img.shape == (12, 16, 3) and img.dtype == np.uint8
    assert abs(int(img[5, 5, 0]) - 250) <= 3 and abs(int(img[5, 5, 2]) - 42) <= 3  # BGR order


def test_ilsvrc_test_split_without_list(ilsvrc):
    root, meta, _ = ilsvrc
    ds = dataset.ILSVRC12Files(str(root), "test", meta_dir=str(meta))
    ds.reset_state()
    assert [lab for _, lab in ds] == [-1, -1]


def test_ilsvrc_val_in_class_folders(ilsvrc, tmp_path):
    root, meta, _ = ilsvrc
    os.remove(meta / "val.txt")
    alt = tmp_path / "alt"
    (alt / "val" / WNIDS[1]).mkdir(parents=True)
    _jpeg(alt / "val" / WNIDS[1] / "x.JPEG", 1)
    ds = dataset.ILSVRC12Files(str(alt), "val", meta_dir=str(meta))
    assert ds.dir_structure == "train"
    ds.reset_state()
    assert [lab for _, lab in ds] == [1]
    with pytest.raises(DatasetFilesNotFound, match="val.txt"):
        dataset.ILSVRC12Files(str(root), "val", meta_dir=str(meta))


def test_ilsvrc_errors(ilsvrc, tmp_path):
    root, meta, _ = ilsvrc
    with pytest.raises(FileNotFoundError, match="no 'train' folder"):
        dataset.ILSVRC12Files(str(tmp_path / "nothing"), "train", meta_dir=str(meta))
    with pytest.raises(ValueError, match="name must be one of"):
        dataset.ILSVRC12Files(str(root), "training", meta_dir=str(meta))
    # val.txt naming a file that is not there
    with open(meta / "val.txt", "a") as f:
        f.write("ILSVRC2012_val_99999999.JPEG 1\n")
    with pytest.raises(ValueError, match=r"does not match the files .* 1 of its 4"):
        dataset.ILSVRC12Files(str(root), "val", meta_dir=str(meta))
    # a class folder that is not in the synset list
    (root / "train" / "n99999999").mkdir()
    with pytest.raises(ValueError, match="n99999999"):
        dataset.ILSVRC12Files(str(root), "train", meta_dir=str(meta))


def test_ilsvrc_train_list_label_mismatch(ilsvrc):
    root, meta, _ = ilsvrc
    (meta / "train.txt").write_text(f"{WNIDS[0]}/{WNIDS[0]}_0.JPEG 0\n{WNIDS[1]}/{WNIDS[1]}_0.JPEG 0\n")
    with pytest.raises(ValueError, match="differs from their folder"):
        dataset.ILSVRC12Files(str(root), "train", meta_dir=str(meta))
    (meta / "train.txt").write_text(f"{WNIDS[0]}/{WNIDS[0]}_0.JPEG zero\n")
    with pytest.raises(ValueError, match=r"train.txt:1"):
        dataset.ILSVRC12Files(str(root), "train", meta_dir=str(meta))


def test_ilsvrc_corrupt_image(ilsvrc):
    root, meta, _ = ilsvrc
    bad = root / "train" / WNIDS[0] / f"{WNIDS[0]}_1.JPEG"
    bad.write_bytes(b"broken")
    ds = dataset.ILSVRC12(str(root), "train", meta_dir=str(meta), shuffle=False)
    ds.reset_state()
    with pytest.raises(ValueError, match=f"{WNIDS[0]}_1.JPEG"):
        list(ds)
    ds = dataset.ILSVRC12(str(root), "train", meta_dir=str(meta), skip_bad=True)
    ds.reset_state()
    assert len(list(ds)) == 3 and ds.num_skipped == 1
