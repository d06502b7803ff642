"""CIFAR-10 and CIFAR-100 from their python pickle batches."""
from __future__ import annotations

import os
import pickle
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ._arrays import ImageLabelArrays
from .files import DatasetFilesNotFound, download, extract_tar, get_dataset_path

__all__ = ["Cifar10", "Cifar100", "CifarBase"]

# The only globals a CIFAR pickle may name: enough for numpy arrays, nothing that runs code.
_ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode"),
}


class _ArrayOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) not in _ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"global '{module}.{name}' is not allowed in a CIFAR batch")
        return super().find_class(module, name)


def _load_pickle(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            obj = _ArrayOnlyUnpickler(f, encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError) as e:
        raise ValueError(f"'{path}' is not a readable CIFAR python batch ({e}); it is corrupt or "
                         "not the expected file. Delete it and download again.") from e
    if not isinstance(obj, dict):
        raise ValueError(f"'{path}' holds a {type(obj).__name__}, not the dict of a CIFAR batch.")
    # Batches written by Python 2 have bytes keys; accept str keys too.
    return {(k.decode("latin1") if isinstance(k, bytes) else k): v for k, v in obj.items()}


def _read_batch(path: str, label_key: str) -> Tuple[np.ndarray, np.ndarray]:
    d = _load_pickle(path)
    for key in ("data", label_key):
        if key not in d:
            raise ValueError(f"'{path}' has no '{key}' entry (it has {sorted(d)}); it is not a CIFAR "
                             "batch of the expected kind (CIFAR-10 uses 'labels', CIFAR-100 "
                             "'fine_labels' / 'coarse_labels').")
    data = np.asarray(d["data"], dtype=np.uint8)
    labels = np.asarray(d[label_key], dtype=np.int64)
    if data.ndim != 2 or data.shape[1] != 3072 or len(labels) != len(data):
        raise ValueError(f"'{path}': expected 'data' of shape (N, 3072) and N labels, got "
                         f"{data.shape} and {len(labels)} labels.")
    # Rows are 1024 red, 1024 green, 1024 blue values: CHW -> HWC, RGB order.
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(images), labels


class CifarBase(ImageLabelArrays):
    """Shared reader of CIFAR-10 / CIFAR-100; use :class:`Cifar10` or :class:`Cifar100`."""

    NAME = ""
    DIR_NAME = ""
    SUBDIR = ""
    URL = ""
    SPLIT_FILES: Dict[str, List[str]] = {}
    META_FILE = ""
    label_key = "labels"

    def __init__(self, train_or_test: str, shuffle: bool = True, dir: Optional[str] = None,  # noqa: A002
                 download: bool = False):
        if train_or_test not in ("train", "test"):
            raise ValueError(f"{self.NAME}: train_or_test must be 'train' or 'test', got {train_or_test!r}.")
        self.train_or_test = train_or_test
        self.shuffle = bool(shuffle)
        root = os.path.expanduser(dir) if dir is not None else get_dataset_path(self.DIR_NAME)
        self.dir = self._locate(root, download)
        self.images, self.labels = self._load([train_or_test])

    def _locate(self, root: str, do_download: bool) -> str:
        """The folder holding the batch files: ``root/<SUBDIR>`` or ``root`` itself."""
        for d in (os.path.join(root, self.SUBDIR), root):
            if all(os.path.isfile(os.path.join(d, f)) for f in self._all_files()):
                return d
        if do_download:
            archive = download(self.URL, root)
            extract_tar(archive, root)
            return self._locate(root, False)
        raise DatasetFilesNotFound(
            self.NAME, root, [os.path.join(self.SUBDIR, f) for f in self._all_files()],
            f"Pass download=True to fetch and extract {self.URL}, or extract that archive under "
            "that folder (or pass dir=<the folder that holds it>).")

    def _all_files(self) -> List[str]:
        return [f for split in ("train", "test") for f in self.SPLIT_FILES[split]]

    def _load(self, splits: Sequence[str]) -> Tuple[np.ndarray, np.ndarray]:
        parts = [_read_batch(os.path.join(self.dir, f), self.label_key)
                 for s in splits for f in self.SPLIT_FILES[s]]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


    def get_per_pixel_mean(self, names: Sequence[str] = ("train", "test")) -> np.ndarray:
        """Mean image (32x32x3 float32) over the given splits."""
        images = self.images if list(names) == [self.train_or_test] else self._load(names)[0]
        return images.mean(axis=0, dtype=np.float64).astype(np.float32)

    def get_per_channel_mean(self, names: Sequence[str] = ("train", "test")) -> np.ndarray:
        """Mean of each channel (3 float32, RGB) over the given splits."""
        return self.get_per_pixel_mean(names).mean(axis=(0, 1)).astype(np.float32)

    def get_label_names(self) -> List[str]:
        """Class names from the dataset's meta file, in label order."""
        path = os.path.join(self.dir, self.META_FILE)
        if not os.path.isfile(path):
            raise DatasetFilesNotFound(self.NAME, self.dir, [self.META_FILE],
                                       f"It ships in {self.URL}; extract it there.")
        meta = _load_pickle(path)
        key = self._label_names_key()
        if key not in meta:
            raise ValueError(f"'{path}' has no '{key}' entry (it has {sorted(meta)}).")
        return [n.decode("utf-8") if isinstance(n, bytes) else str(n) for n in meta[key]]

    def _label_names_key(self) -> str:
        return "label_names"


class Cifar10(CifarBase):
    """CIFAR-10: yields ``[image, label]``, image uint8 32x32x3 (HWC, RGB), label an int in [0, 10).

    Reads ``cifar-10-batches-py/data_batch_1..5`` and ``test_batch`` under ``dir``.

    Example::

        ds = Cifar10('train', dir='~/data/cifar10')
        mean = ds.get_per_pixel_mean()
    """

    NAME = "Cifar10"
    DIR_NAME = "cifar10_data"
    SUBDIR = "cifar-10-batches-py"
    URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
    SPLIT_FILES = {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]}
    META_FILE = "batches.meta"


class Cifar100(CifarBase):
    """CIFAR-100: yields ``[image, label]`` with the fine (100) or coarse (20) label.

    Reads ``cifar-100-python/train`` and ``test`` under ``dir``.

    Example::

        ds = Cifar100('test', fine_label=False, shuffle=False)
    """

    NAME = "Cifar100"
    DIR_NAME = "cifar100_data"
    SUBDIR = "cifar-100-python"
    URL = "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz"
    SPLIT_FILES = {"train": ["train"], "test": ["test"]}
    META_FILE = "meta"

    def __init__(self, train_or_test: str, shuffle: bool = True, dir: Optional[str] = None,  # noqa: A002
                 fine_label: bool = True, download: bool = False):
        self.fine_label = bool(fine_label)
        self.label_key = "fine_labels" if self.fine_label else "coarse_labels"
        super().__init__(train_or_test, shuffle, dir, download)

    def _label_names_key(self) -> str:
        return "fine_label_names" if self.fine_label else "coarse_label_names"
