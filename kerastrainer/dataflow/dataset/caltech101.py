"""Caltech 101 Silhouettes (28x28) from Marlin's MATLAB file ``caltech101_silhouettes_28_split1.mat``."""
from __future__ import annotations

import os
from typing import Optional, Tuple

import numpy as np

from ._arrays import ImageLabelArrays
from ._matfile import load_mat
from .files import get_dataset_path, single_file

__all__ = ["Caltech101Silhouettes"]


class Caltech101Silhouettes(ImageLabelArrays):
    """Caltech 101 Silhouettes: yields ``[image, label]``, image float32 28x28 in [0, 1],
    label an int in [0, 101) (the file's labels 1..101, minus one).

    Reads ``caltech101_silhouettes_28_split1.mat`` (MATLAB variables ``<name>_data``, N x 784,
    and ``<name>_labels``, N labels, for name in train / test / val) from ``dir`` (default
    ``$KERASTRAINER_DATASET/caltech101_data``). With ``download=True`` a missing file is
    fetched from Marlin's site first. Needs scipy (``pip install kerastrainer[mat]``).

    Each row of 784 values becomes a 28x28 image row by row (C order), as tensorpack does,
    so a model sees the same pixels as under tensorpack.

    Example::

        ds = Caltech101Silhouettes('train', dir='~/data/caltech101')
        ds.reset_state()
        img, label = next(iter(ds))         # (28, 28) float32, int
    """

    NAME = "Caltech101Silhouettes"
    DIR_NAME = "caltech101_data"
    URL = "https://people.cs.umass.edu/~marlin/data/"
    FILE = "caltech101_silhouettes_28_split1.mat"

    def __init__(self, name: str, shuffle: bool = True, dir: Optional[str] = None,  # noqa: A002
                 download: bool = False):
        if name not in ("train", "test", "val"):
            raise ValueError(f"{self.NAME}: name must be 'train', 'test' or 'val', got {name!r}.")
        self.name = name
        self.shuffle = bool(shuffle)
        self.dir = os.path.expanduser(dir) if dir is not None else get_dataset_path(self.DIR_NAME)
        path = single_file(self.NAME, self.dir, self.FILE, self.URL, download)
        self.path = path
        self.images, self.labels = _read_split(path, name, self.NAME)


def _read_split(path: str, name: str, dataset: str) -> Tuple[np.ndarray, np.ndarray]:
    data_key, label_key = f"{name}_data", f"{name}_labels"
    d = load_mat(path, [data_key, label_key], dataset)
    data, labels = d[data_key], d[label_key]
    if data.ndim != 2 or data.shape[1] != 28 * 28:
        raise ValueError(f"{dataset}: '{path}': expected '{data_key}' of shape (N, 784), got {data.shape}.")
    n = data.shape[0]
    if labels.size != n or labels.ndim > 2 or (labels.ndim == 2 and 1 not in labels.shape):
        raise ValueError(f"{dataset}: '{path}': expected '{label_key}' of shape ({n}, 1) to match the {n} "
                         f"rows of '{data_key}', got {labels.shape}.")
    if data.size and (data.min() < 0 or data.max() > 1):
        raise ValueError(f"{dataset}: '{path}': '{data_key}' has values outside [0, 1]; "
                         "it is not silhouette data.")
    labels = labels.reshape(-1)
    if labels.size and (labels.min() < 1 or labels.max() > 101 or np.any(labels != np.round(labels))):
        raise ValueError(f"{dataset}: '{path}': '{label_key}' must hold class labels in 1..101, "
                         f"found values in [{labels.min()}, {labels.max()}].")
    images = data.astype(np.float32).reshape(n, 28, 28)
    return images, labels.astype(np.int64) - 1
