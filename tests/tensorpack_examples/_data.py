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
