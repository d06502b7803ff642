"""Augmentors made of other augmentors: a fixed sequence, or a random order."""
from __future__ import annotations

from typing import Sequence, Tuple

import numpy as np

from .base import ImageAugmentor, check_image
from .transform import Transform, TransformList

__all__ = ["AugmentorList", "RandomOrderAug"]


def _as_augmentor_list(augmentors, who: str):
    if isinstance(augmentors, ImageAugmentor):
        augmentors = [augmentors]
    augmentors = list(augmentors)
    for i, a in enumerate(augmentors):
        if not isinstance(a, ImageAugmentor):
            raise TypeError(f"{who}: item {i} is a {type(a).__name__}, not an ImageAugmentor.")
    return augmentors


class AugmentorList(ImageAugmentor):
    """Apply several augmentors in order; the drawn transform is a :class:`TransformList`.

    Each augmentor draws its transform from the output of the previous one, so
    sizes chain correctly (e.g. ``ResizeShortestEdge`` then ``CenterCrop``).

    Example::

        augs = AugmentorList([ResizeShortestEdge(256), CenterCrop(224)])
        augs.reset_state()
        out, tfm = augs.augment_return_params(img)
        mask_out = tfm.apply_mask(mask)
    """

    def __init__(self, augmentors: Sequence[ImageAugmentor]):
        self.augmentors = _as_augmentor_list(augmentors, type(self).__name__)
        super().__init__()

    def reset_state(self) -> None:
        super().reset_state()
        for a in self.augmentors:
            a.reset_state()

    def _ordered(self):
        return self.augmentors

    def augment_return_params(self, img: np.ndarray) -> Tuple[np.ndarray, Transform]:
        check_image(img, type(self).__name__)
        tfms = []
        for a in self._ordered():
            t = a.get_transform(img)
            img = t.apply_image(img)
            tfms.append(t)
        return img, TransformList(tfms)

    def get_transform(self, img: np.ndarray) -> Transform:
        # Later augmentors draw from earlier outputs, so the image is computed on the way.
        return self.augment_return_params(img)[1]


class RandomOrderAug(AugmentorList):
    """Apply several augmentors in a random order drawn for each image.

    Example::

        jitter = RandomOrderAug([BrightnessScale((0.6, 1.4)), Contrast((0.6, 1.4)), Saturation(0.4)])
    """

    def _ordered(self):
        return [self.augmentors[i] for i in self.rng.permutation(len(self.augmentors))]
