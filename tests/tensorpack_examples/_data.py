"""Tiny datasets in the on-disk formats tensorpack's readers use (MNIST IDX, CIFAR pickles, SVHN .mat)."""
import os
import pickle
import struct

import numpy as np


def write_mnist(root, n_train=256, n_test=256, seed=0):
    """``root/mnist_data/{train,t10k}-{images-idx3,labels-idx1}-ubyte``: learnable digits-like data."""
    rng = np.random.RandomState(seed)
    d = os.path.join(root, "mnist_data")
    os.makedirs(d, exist_ok=True)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = rng.randint(0, 10, size=n).astype(np.uint8)
        images = rng.randint(0, 40, size=(n, 28, 28)).astype(np.uint8)
        for i, c in enumerate(labels):  # a bright bar whose place says the class
            images[i, 2 + 2 * c:4 + 2 * c, 4:24] = 255
        with open(os.path.join(d, f"{prefix}-images-idx3-ubyte"), "wb") as f:
            f.write(struct.pack(">IIII", 2051, n, 28, 28) + images.tobytes())
        with open(os.path.join(d, f"{prefix}-labels-idx1-ubyte"), "wb") as f:
            f.write(struct.pack(">II", 2049, n) + labels.tobytes())
    return d


def write_cifar10(root, n_per_batch=64, seed=0):
    """``root/cifar10_data/cifar-10-batches-py/`` with data_batch_1..5, test_batch, batches.meta."""
    rng = np.random.RandomState(seed)
    d = os.path.join(root, "cifar10_data", "cifar-10-batches-py")
    os.makedirs(d, exist_ok=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        labels = rng.randint(0, 10, size=n_per_batch).tolist()
        data = rng.randint(0, 256, size=(n_per_batch, 3 * 32 * 32)).astype(np.uint8)
        with open(os.path.join(d, name), "wb") as f:
            pickle.dump({b"data": data, b"labels": labels, b"batch_label": name.encode()}, f, protocol=2)
    with open(os.path.join(d, "batches.meta"), "wb") as f:
        pickle.dump({b"label_names": [f"class{i}".encode() for i in range(10)]}, f, protocol=2)
    return d


def write_svhn(root, n_train=256, n_test=128, n_extra=128, seed=0):
    """``root/svhn_data/{train,test,extra}_32x32.mat`` in SVHN's layout: ``X`` 32x32x3xN uint8,
    ``y`` Nx1 with labels 1..10 (10 is digit 0). The digit is a bright bar whose place says the
    class, so a small convnet learns it in a few steps. Needs scipy."""
    import scipy.io

    rng = np.random.RandomState(seed)
    d = os.path.join(root, "svhn_data")
    os.makedirs(d, exist_ok=True)
    for name, n in (("train", n_train), ("test", n_test), ("extra", n_extra)):
        digits = rng.randint(0, 10, size=n)
        x = rng.randint(0, 60, size=(32, 32, 3, n)).astype(np.uint8)
        for i, c in enumerate(digits):
            x[2 + 3 * c:4 + 3 * c, 4:28, :, i] = 255
        y = np.where(digits == 0, 10, digits).astype(np.uint8).reshape(n, 1)
        scipy.io.savemat(os.path.join(d, f"{name}_32x32.mat"), {"X": x, "y": y})
    return d


def write_ilsvrc12(root, meta_dir=None, wnids=("n01440764", "n01443537", "n01484850"),
                   n_train_per_class=8, n_val=6, size=(40, 70), seed=0):
    """A tiny ILSVRC12 root in the layout tensorpack's ``dataset.ILSVRC12`` reads:
    ``train/<wnid>/<wnid>_<i>.JPEG`` and a flat ``val/``, with the metadata ``val.txt``
    ("<file> <label>" lines) and ``synsets.txt`` (one wnid a line, the label order) in
    ``meta_dir`` (default ``root``; the readers' default is ``<dataset dir>/ilsvrc_metadata``).
    Real JPEG files of random sizes in ``size``; a class is a brightness level plus noise, so a
    model learns it in a few steps. Needs opencv."""
    import cv2

    rng = np.random.RandomState(seed)

    def jpeg(path, label):
        h, w = rng.randint(size[0], size[1], size=2)
        img = np.clip(rng.rand(h, w, 3) * 60 + label * 90, 0, 255).astype(np.uint8)
        assert cv2.imwrite(path, img), path

    for label, wnid in enumerate(wnids):
        os.makedirs(os.path.join(root, "train", wnid), exist_ok=True)
        for i in range(n_train_per_class):
            jpeg(os.path.join(root, "train", wnid, f"{wnid}_{i}.JPEG"), label)
    os.makedirs(os.path.join(root, "val"), exist_ok=True)
    lines = []
    for i in range(n_val):
        name = f"ILSVRC2012_val_{i + 1:08d}.JPEG"
        jpeg(os.path.join(root, "val", name), i % len(wnids))
        lines.append(f"{name} {i % len(wnids)}\n")
    meta_dir = meta_dir or root
    os.makedirs(meta_dir, exist_ok=True)
    with open(os.path.join(meta_dir, "val.txt"), "w") as f:
        f.writelines(lines)
    with open(os.path.join(meta_dir, "synsets.txt"), "w") as f:
        f.writelines(w + "\n" for w in wnids)
    return root


def write_celeba(root, n=8, attrs=("Male", "Smiling"), seed=0):
    """A tiny ``img_align_celeba`` directory: ``000001.jpg``... (178x218, CelebA's size) and
    ``list_attr_celeba.txt`` (the count, the attribute names, then one ``<file> 1/-1 ...`` line an
    image), with each attribute both 1 and -1 somewhere. Needs opencv."""
    import cv2

    rng = np.random.RandomState(seed)
    os.makedirs(root, exist_ok=True)
    lines = [f"{n}\n", " ".join(attrs) + "\n"]
    for i in range(n):
        name = f"{i + 1:06d}.jpg"
        assert cv2.imwrite(os.path.join(root, name), rng.randint(0, 255, (218, 178, 3)).astype(np.uint8))
        values = [1 if (i >> k) % 2 == 0 else -1 for k in range(len(attrs))]
        lines.append(name + " " + " ".join(f"{v:2d}" for v in values) + "\n")
    with open(os.path.join(root, "list_attr_celeba.txt"), "w") as f:
        f.writelines(lines)
    return root


def write_jpeg_dir(d, n=4, shape=(64, 64), seed=0):
    """``d/0.jpg``... of random pixels, ``shape`` (height, width) each. Needs opencv."""
    import cv2

    rng = np.random.RandomState(seed)
    os.makedirs(d, exist_ok=True)
    for i in range(n):
        assert cv2.imwrite(os.path.join(d, f"{i}.jpg"), rng.randint(0, 255, tuple(shape) + (3,)).astype(np.uint8))
    return d


def write_bsds500(root, n_per_split=4, seed=0):
    """``root/bsds500_data/BSR/BSDS500/data/{images,groundTruth}/{train,val,test}/``: 481x321 JPEGs
    (one portrait, as in BSDS500) and their ``.mat`` files with ``groundTruth``, a 1xK cell of
    structs whose ``Boundaries`` is a 0/1 edge map (two annotators). Needs opencv and scipy."""
    import cv2
    import scipy.io

    rng = np.random.RandomState(seed)
    base = os.path.join(root, "bsds500_data", "BSR", "BSDS500", "data")
    for split in ("train", "val", "test"):
        os.makedirs(os.path.join(base, "images", split), exist_ok=True)
        os.makedirs(os.path.join(base, "groundTruth", split), exist_ok=True)
        for i in range(n_per_split):
            h, w = (481, 321) if i == 0 else (321, 481)
            img = rng.randint(0, 255, (h, w, 3)).astype(np.uint8)
            assert cv2.imwrite(os.path.join(base, "images", split, f"{i}.jpg"), img)
            annotators = np.empty((1, 2), dtype=object)
            for k in range(2):
                edges = np.zeros((h, w), dtype=np.uint8)
                edges[h // 3 + k, :] = 1
                edges[:, w // 2 - k] = 1
                annotators[0, k] = {"Boundaries": edges}
            scipy.io.savemat(os.path.join(base, "groundTruth", split, f"{i}.mat"), {"groundTruth": annotators})
    return os.path.join(root, "bsds500_data")


def write_imagenet_mean(meta_dir, seed=0):
    """``meta_dir/imagenet_mean.binaryproto``: a 3x256x256 mean image in Caffe's ``BlobProto`` wire
    format (num, channels, height, width as varints; ``data`` packed floats), as in tensorpack's
    ILSVRC12 metadata archive. Returns the (256, 256, 3) array it holds."""
    rng = np.random.RandomState(seed)
    data = (rng.rand(3, 256, 256) * 255).astype("<f4")

    def varint(v):
        out = b""
        while True:
            b, v = v & 0x7F, v >> 7
            out += bytes([b | (0x80 if v else 0)])
            if not v:
                return out

    buf = b"".join(varint(field << 3) + varint(v) for field, v in ((1, 1), (2, 3), (3, 256), (4, 256)))
    payload = data.tobytes()
    buf += varint(5 << 3 | 2) + varint(len(payload)) + payload
    os.makedirs(meta_dir, exist_ok=True)
    with open(os.path.join(meta_dir, "imagenet_mean.binaryproto"), "wb") as f:
        f.write(buf)
    return np.transpose(data, [1, 2, 0])
