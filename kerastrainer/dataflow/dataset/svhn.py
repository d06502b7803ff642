"""SVHN cropped digits from the original MATLAB files ``{train,test,extra}_32x32.mat``."""
from __future__ import annotations

import functools
import os
import threading
import types
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from ._arrays import ImageLabelArrays
from ._matfile import load_mat
from .files import get_dataset_path, single_file

__all__ = ["SVHNDigit"]

_SPLITS = ("train", "test", "extra")


class _ClassOrInstanceMethod:
    """A method callable on the class (like tensorpack's staticmethod) or on an instance.

    On the class it reads the default folder; on an instance, that instance's folder.
    """

    def __init__(self, fn):
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __get__(self, obj, objtype=None):
        if obj is not None:
            return types.MethodType(self.fn, obj)

        @functools.wraps(self.fn)
        def on_class(*args, **kwargs):
            return self.fn(None, *args, **kwargs)
        return on_class


class SVHNDigit(ImageLabelArrays):
    """SVHN cropped digits: yields ``[image, label]``, image uint8 32x32x3 (HWC, RGB) in
    [0, 255], label an int in [0, 10) (the files' label 10 is digit 0).

    Reads ``<name>_32x32.mat`` (MATLAB variables ``X`` of shape 32x32x3xN and ``y`` of N
    labels in 1..10) from ``data_dir`` (default ``$KERASTRAINER_DATASET/svhn_data``).
    With ``download=True`` a missing file is fetched from the SVHN site first. Needs
    scipy (``pip install kerastrainer[mat]``).

    As in tensorpack, the arrays of a file are read once per process and shared by every
    reader of that file (``SVHNDigit('train')`` twice costs one load).

    Example::

        ds = SVHNDigit('train', data_dir='~/data/svhn')
        ds.reset_state()
        img, label = next(iter(ds))         # (32, 32, 3) uint8, int
        mean = SVHNDigit.get_per_pixel_mean(('train',))
    """

    NAME = "SVHNDigit"
    DIR_NAME = "svhn_data"
    URL = "http://ufldl.stanford.edu/housenumbers/"

    # (absolute path, mtime, size) -> (images N x 32 x 32 x 3, labels N): a replaced file is re-read.
    _cache: Dict[Tuple[str, int, int], Tuple[np.ndarray, np.ndarray]] = {}
    _cache_lock = threading.Lock()

    def __init__(self, name: str, data_dir: Optional[str] = None, shuffle: bool = True,
                 download: bool = False):
        if name not in _SPLITS:
            raise ValueError(f"{self.NAME}: name must be one of {list(_SPLITS)}, got {name!r}.")
        self.name = name
        self.shuffle = bool(shuffle)
        self.dir = os.path.expanduser(data_dir) if data_dir is not None else get_dataset_path(self.DIR_NAME)
        path = single_file(self.NAME, self.dir, f"{name}_32x32.mat", self.URL, download, dir_arg="data_dir")
        self.path = path
        self.images, self.labels = self._read(path)

    @property
    def X(self) -> np.ndarray:   # tensorpack's names of the arrays
        return self.images

    @property
    def Y(self) -> np.ndarray:
        return self.labels

    @classmethod
    def _read(cls, path: str) -> Tuple[np.ndarray, np.ndarray]:
        st = os.stat(path)
        key = (os.path.abspath(path), st.st_mtime_ns, st.st_size)
        with cls._cache_lock:
            if key not in cls._cache:
                for stale in [k for k in cls._cache if k[0] == key[0]]:  # the file was replaced
                    del cls._cache[stale]
                cls._cache[key] = _read_svhn_mat(path, cls.NAME)
            return cls._cache[key]


    @_ClassOrInstanceMethod
    def get_per_pixel_mean(self, names: Sequence[str] = _SPLITS) -> np.ndarray:
        """Mean image (32x32x3 float32) over the given splits.

        Callable as ``SVHNDigit.get_per_pixel_mean(names)`` (tensorpack's form, default folder)
        or on a reader, which uses its own folder.
        """
        data_dir = self.dir if self is not None else None
        total = np.zeros((32, 32, 3), np.float64)
        count = 0
        for n in names:
            # Sum split by split: concatenating train+test+extra would need ~2 GB at once.
            images = SVHNDigit(n, data_dir=data_dir, shuffle=False).X
            total += images.sum(axis=0, dtype=np.float64)
            count += len(images)
        if count == 0:
            raise ValueError(f"{SVHNDigit.NAME}: get_per_pixel_mean needs at least one image; names={list(names)}.")
        return (total / count).astype(np.float32)


def _read_svhn_mat(path: str, dataset: str) -> Tuple[np.ndarray, np.ndarray]:
    d = load_mat(path, ["X", "y"], dataset)
    x, y = d["X"], d["y"]
    if x.ndim != 4 or x.shape[:3] != (32, 32, 3):
        raise ValueError(f"{dataset}: '{path}': expected 'X' of shape (32, 32, 3, N), got {x.shape}.")
    n = x.shape[3]
    if y.size != n or (y.ndim == 2 and 1 not in y.shape) or y.ndim > 2:
        raise ValueError(f"{dataset}: '{path}': expected 'y' of shape ({n}, 1) to match the {n} images "
                         f"in 'X', got {y.shape}.")
    if x.dtype != np.uint8:
        if x.size and (x.min() < 0 or x.max() > 255):
            raise ValueError(f"{dataset}: '{path}': 'X' has values outside [0, 255] "
                             f"(dtype {x.dtype}); it is not SVHN image data.")
        x = x.astype(np.uint8)
    labels = y.reshape(-1)
    if labels.size and (labels.min() < 0 or labels.max() > 10 or np.any(labels != np.round(labels))):
        raise ValueError(f"{dataset}: '{path}': 'y' must hold digit labels in 1..10 (10 for digit 0), "
                         f"found values in [{labels.min()}, {labels.max()}].")
    labels = labels.astype(np.int64)
    labels[labels == 10] = 0  # SVHN writes digit 0 as label 10
    images = np.ascontiguousarray(x.transpose(3, 0, 1, 2))  # MATLAB HWCN -> NHWC
    images.setflags(write=False)
    labels.setflags(write=False)
    return images, labels
