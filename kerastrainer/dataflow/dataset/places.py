"""Places365-Standard (low resolution), from its "easy directory structure"."""
from __future__ import annotations

import os
from typing import Iterator, Optional

import numpy as np

from ..base import RNGDataFlow
from .files import DatasetFilesNotFound

__all__ = ["Places365Standard"]


class Places365Standard(RNGDataFlow):
    """``[image, label]``: a (256, 256, 3) BGR uint8 image in [0, 255] and its class id. The list
    ``<dir>/<name>.txt`` has one path relative to ``dir`` per line (``train/airfield/00000001.jpg``);
    the class is the path's second component, ids are the sorted class names' positions.

    Example::

        ds = Places365Standard('~/data/places365_standard', 'train')
    """

    def __init__(self, dir: str, name: str, shuffle: Optional[bool] = None):
        if name not in ("train", "val"):
            raise ValueError(f"Places365Standard: name must be 'train' or 'val', got {name!r}")
        dir = os.path.expanduser(dir)
        list_file = os.path.join(dir, name + ".txt")
        if not os.path.isfile(list_file):
            raise DatasetFilesNotFound("Places365Standard", dir, [f"{name}.txt", f"{name}/<class dirs>/*.jpg"],
                                       "Download places365standard_easyformat.tar and extract it there.")
        self.name = name
        self.shuffle = name == "train" if shuffle is None else shuffle
        entries = []
        with open(list_file) as f:
            for line in f:
                rel = line.strip().split()[0] if line.strip() else ""
                if rel:
                    entries.append((os.path.join(dir, rel.lstrip("/")), rel.strip("/").split("/")[1]))
        classes = sorted({c for _, c in entries})
        ids = {c: i for i, c in enumerate(classes)}
        self.classes = classes
        self._files = [(p, ids[c]) for p, c in entries]

    def __len__(self) -> int:
        return len(self._files)

    def __iter__(self) -> Iterator[list]:
        import cv2
        idx = np.arange(len(self._files))
        if self.shuffle:
            self.rng.shuffle(idx)
        for k in idx:
            path, label = self._files[k]
            im = cv2.imread(path, cv2.IMREAD_COLOR)
            if im is None:
                raise ValueError(f"Places365Standard: cannot read {path}")
            yield [im, label]
