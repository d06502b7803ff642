"""Tiny, learnable stand-ins for the datasets the third-party programs download, written in the
on-disk formats their readers (kerastrainer.dataflow.dataset) expect. Test data, not part of the ports."""
import itertools
import os
import pickle

import numpy as np

# ten colours, every pair apart by at least 87 levels in one channel: a class is its image's colour,
# which CIFAR's augmentations (pad, crop, flip) keep and an L-inf perturbation of 8 levels cannot hide
PALETTE = np.array(list(itertools.product((40, 128, 215), repeat=3))[::2][:10], dtype=np.int32)


def colour_images(rng, labels, size=32, noise=30):
    n = len(labels)
    imgs = PALETTE[labels][:, None, None, :] + rng.randint(-noise, noise + 1, size=(n, size, size, 3))
    return np.clip(imgs, 0, 255).astype(np.uint8)


def write_cifar10(root, n_per_batch=64, seed=0):
    """``root/cifar10_data/cifar-10-batches-py/``: data_batch_1..5, test_batch, batches.meta (CIFAR's
    pickles: rows of 3x32x32 uint8 in CHW order); each image is its class's colour plus noise."""
    rng = np.random.RandomState(seed)
    d = os.path.join(root, "cifar10_data", "cifar-10-batches-py")
    os.makedirs(d, exist_ok=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        labels = rng.randint(0, 10, size=n_per_batch)
        data = colour_images(rng, labels).transpose(0, 3, 1, 2).reshape(n_per_batch, -1)
        with open(os.path.join(d, name), "wb") as f:
            pickle.dump({b"data": data, b"labels": labels.tolist(), b"batch_label": name.encode()}, f, protocol=2)
    with open(os.path.join(d, "batches.meta"), "wb") as f:
        pickle.dump({"label_names": [f"class{i}" for i in range(10)]}, f, protocol=2)
    return d
