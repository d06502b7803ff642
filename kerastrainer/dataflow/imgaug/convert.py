"""Conversions and user functions as augmentors."""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from .base import ImageAugmentor
from .transform import FunctionTransform, PhotometricTransform

__all__ = ["MapImage", "ToUint8", "ToFloat32"]


class MapImage(ImageAugmentor):
    """Apply a deterministic function to the image (and optionally to coordinates).

    Example::

        MapImage(lambda im: im[:, :, ::-1])          # BGR -> RGB
        MapImage(lambda im: im - 128.0, coords_func=lambda c: c)
    """

    def __init__(self, func: Callable[[np.ndarray], np.ndarray],
                 coords_func: Optional[Callable[[np.ndarray], np.ndarray]] = None):
        super().__init__()
        if not callable(func):
            raise TypeError(f"MapImage: func must be callable, got {type(func).__name__}.")
        self.func, self.coords_func = func, coords_func

    def get_transform(self, img):
        return FunctionTransform(self.func, self.coords_func)


def _to_uint8(img: np.ndarray) -> np.ndarray:
    if img.dtype == np.uint8:
        return img
    return np.rint(np.clip(img, 0, 255)).astype(np.uint8)


def _to_float32(img: np.ndarray) -> np.ndarray:
    return img.astype(np.float32, copy=False)


class ToUint8(ImageAugmentor):
    """Round and clip to [0, 255], then cast to uint8 (a no-op for uint8 input)."""

    def get_transform(self, img):
        return PhotometricTransform(_to_uint8, "ToUint8")


class ToFloat32(ImageAugmentor):
    """Cast to float32 without rescaling (values stay in [0, 255] for uint8 input)."""

    def get_transform(self, img):
        return PhotometricTransform(_to_float32, "ToFloat32")
