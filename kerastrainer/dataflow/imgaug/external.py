"""Augmentors of other libraries (aleju/imgaug, albumentations) as kerastrainer augmentors.

Neither library is a dependency: these wrap objects the user made with them.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ._transforms import Transform
from .base import ImageAugmentor

__all__ = ["IAAugmentor", "Albumentations"]


class _IAATransform(Transform):
    def __init__(self, aug: Any, img_shape):
        self.aug, self.img_shape = aug, img_shape

    def apply_image(self, img):
        return self.aug.augment_image(img)

    def apply_coords(self, coords):
        import imgaug as ia  # the aleju/imgaug library, present when its augmenter was given
        points = ia.KeypointsOnImage([ia.Keypoint(x=x, y=y) for x, y in coords], shape=self.img_shape)
        moved = self.aug.augment_keypoints([points])[0].keypoints
        return np.asarray([[p.x, p.y] for p in moved], dtype=np.float32)


class IAAugmentor(ImageAugmentor):
    """Wrap an augmenter of the aleju/imgaug library (``imgaug.augmenters``): one
    deterministic copy is drawn per image, so images and coordinates move together.

    Example::

        from imgaug import augmenters as iaa
        aug = IAAugmentor(iaa.Sequential([iaa.Fliplr(0.5), iaa.Sharpen(alpha=(0, 1))]))
    """

    def __init__(self, augmentor: Any):
        super().__init__()
        if not hasattr(augmentor, "to_deterministic"):
            raise TypeError(f"IAAugmentor needs an aleju/imgaug augmenter, got {type(augmentor).__name__}.")
        self._aug = augmentor

    def get_transform(self, img):
        return _IAATransform(self._aug.to_deterministic(), img.shape)


class _AlbumentationsTransform(Transform):
    def __init__(self, aug: Any, params: dict):
        self.aug, self.params = aug, params

    def apply_image(self, img):
        return self.aug.apply(img, **self.params)


class Albumentations(ImageAugmentor):
    """Wrap an albumentations transform (images only: it cannot move coordinates).

    Example::

        import albumentations as A
        aug = Albumentations(A.RandomRotate90(p=1))
    """

    def __init__(self, augmentor: Any):
        super().__init__()
        if not (hasattr(augmentor, "get_params") and hasattr(augmentor, "apply")):
            raise TypeError(f"Albumentations needs an albumentations transform, got {type(augmentor).__name__}.")
        self._aug = augmentor

    def get_transform(self, img):
        return _AlbumentationsTransform(self._aug, self._aug.get_params())
