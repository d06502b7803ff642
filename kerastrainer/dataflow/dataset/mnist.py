"""MNIST and Fashion-MNIST from their IDX files (gzipped or not)."""
from __future__ import annotations

import gzip
import os
import struct
import zlib
from typing import Optional, Tuple

import numpy as np

from ._arrays import ImageLabelArrays
from .files import DatasetFilesNotFound, download, first_existing, get_dataset_path

__all__ = ["Mnist", "FashionMnist", "read_idx_images", "read_idx_labels"]

_IMAGES_MAGIC = 2051  # 0x00000803: unsigned bytes, 3 dimensions
_LABELS_MAGIC = 2049  # 0x00000801: unsigned bytes, 1 dimension


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise ValueError(f"'{path}' is not a valid gzip file ({e}); delete it and download again.") from e
    return data


def _check_header(path: str, data: bytes, magic: int, header_len: int, what: str):
    if len(data) < header_len:
        raise ValueError(f"'{path}' is too short ({len(data)} bytes) to be an IDX {what} file; "
                         "it is corrupt or truncated.")
    fields = struct.unpack(">" + "I" * (header_len // 4), data[:header_len])
    if fields[0] != magic:
        raise ValueError(f"'{path}' has magic number {fields[0]}, not {magic} of an IDX {what} file; "
                         "it is corrupt or not the expected file.")
    return fields[1:]


def read_idx_images(path: str) -> np.ndarray:
    """Read an IDX image file (``.gz`` or plain) as a uint8 array of shape (N, rows, cols)."""
    data = _read_bytes(path)
    n, rows, cols = _check_header(path, data, _IMAGES_MAGIC, 16, "image")
    need = 16 + n * rows * cols
    if len(data) < need:
        raise ValueError(f"'{path}' is truncated: its header announces {n} images of {rows}x{cols} "
                         f"({need} bytes) but it has {len(data)} bytes.")
    return np.frombuffer(data, dtype=np.uint8, count=n * rows * cols, offset=16).reshape(n, rows, cols)


def read_idx_labels(path: str) -> np.ndarray:
    """Read an IDX label file (``.gz`` or plain) as a uint8 array of shape (N,)."""
    data = _read_bytes(path)
    (n,) = _check_header(path, data, _LABELS_MAGIC, 8, "label")
    if len(data) < 8 + n:
        raise ValueError(f"'{path}' is truncated: its header announces {n} labels but it has "
                         f"{len(data) - 8} bytes of labels.")
    return np.frombuffer(data, dtype=np.uint8, count=n, offset=8)


class Mnist(ImageLabelArrays):
    """MNIST digits: yields ``[image, label]``, image float32 28x28 in [0, 1], label an int.

    Reads ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte`` (and ``t10k-...``
    for the test split) from ``dir``, each plain or gzipped (``.gz``). With
    ``download=True`` missing files are fetched first.

    Example::

        ds = Mnist('train', dir='~/data/mnist')
        ds.reset_state()
        img, label = next(iter(ds))     # (28, 28) float32, int
    """

    DIR_NAME = "mnist_data"
    URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"
    NAME = "Mnist"

    def __init__(self, train_or_test: str, shuffle: bool = True, dir: Optional[str] = None,  # noqa: A002
                 download: bool = False):
        if train_or_test not in ("train", "test"):
            raise ValueError(f"{self.NAME}: train_or_test must be 'train' or 'test', got {train_or_test!r}.")
        self.train_or_test = train_or_test
        self.shuffle = bool(shuffle)
        self.dir = os.path.expanduser(dir) if dir is not None else get_dataset_path(self.DIR_NAME)
        prefix = "train" if train_or_test == "train" else "t10k"
        bases = [f"{prefix}-images-idx3-ubyte", f"{prefix}-labels-idx1-ubyte"]
        image_path, label_path = (self._find(b, download) for b in bases)
        if image_path is None or label_path is None:
            raise DatasetFilesNotFound(
                self.NAME, self.dir, [f"{b} (or {b}.gz)" for b in bases],
                f"Pass download=True to fetch them from {self.URL}, or copy the IDX files there "
                "(or pass dir=<the folder that holds them>).")
        self.images = read_idx_images(image_path)
        self.labels = read_idx_labels(label_path)
        if len(self.images) != len(self.labels):
            raise ValueError(f"{self.NAME}: '{image_path}' has {len(self.images)} images but "
                             f"'{label_path}' has {len(self.labels)} labels; one of them is the wrong file.")

    def _find(self, base: str, do_download: bool) -> Optional[str]:
        path = first_existing([os.path.join(self.dir, base), os.path.join(self.dir, base + ".gz")])
        if path is None and do_download:
            path = download(self.URL + base + ".gz", self.dir)
        return path

    def image(self, k: int) -> np.ndarray:
        return self.images[k].astype(np.float32) * np.float32(1.0 / 255)

    def as_arrays(self) -> Tuple[np.ndarray, np.ndarray]:
        """All images (uint8, N x 28 x 28) and labels (uint8, N) in file order."""
        return self.images, self.labels


class FashionMnist(Mnist):
    """Fashion-MNIST: same files, format and datapoints as :class:`Mnist`.

    Example::

        ds = FashionMnist('test', shuffle=False, dir='~/data/fashion_mnist')
    """

    DIR_NAME = "fashion_mnist_data"
    URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
    NAME = "FashionMnist"
