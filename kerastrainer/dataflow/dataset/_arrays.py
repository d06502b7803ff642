"""The DataFlow shared by the readers that hold a whole split in memory."""
from __future__ import annotations

import numpy as np

from ..base import RNGDataFlow

__all__ = ["ImageLabelArrays"]


class ImageLabelArrays(RNGDataFlow):
    """Yields ``[image, label]`` from ``self.images`` (N x ...) and ``self.labels`` (N), in a new
    random order each pass when ``self.shuffle``; a subclass loads the arrays and may convert
    an image on its way out (:meth:`image`).

    Example::

        class Digits(ImageLabelArrays):
            def __init__(self, shuffle=True):
                self.images, self.labels, self.shuffle = load_digits(), load_labels(), shuffle
    """

    images: np.ndarray
    labels: np.ndarray
    shuffle: bool = True

    def __len__(self) -> int:
        return len(self.images)

    def __iter__(self):
        idxs = np.arange(len(self.images))
        if self.shuffle:
            self.rng.shuffle(idxs)
        for k in idxs:
            yield [self.image(k), int(self.labels[k])]

    def image(self, k: int) -> np.ndarray:
        """Image ``k`` as yielded: a copy, so that in-place augmentation downstream never
        alters the dataset."""
        return self.images[k].copy()
