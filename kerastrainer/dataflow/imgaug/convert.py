"""Conversions and user functions as augmentors."""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from ...utils.casting import whole_number
from ._cv2 import cv2
from ._transforms import FunctionTransform, PhotometricTransform
from .base import ImageAugmentor

__all__ = ["MapImage", "ToUint8", "ToFloat32", "ColorSpace", "Grayscale"]


class MapImage(ImageAugmentor):
    """Apply a deterministic function to the image (and optionally to coordinates).

    Example::

        MapImage(lambda im: im[:, :, ::-1])          # BGR -> RGB
        MapImage(lambda im: im - 128.0, coords_func=lambda c: c)
    """

    def __init__(self, func: Callable[[np.ndarray], np.ndarray],
                 coords_func: Optional[Callable[[np.ndarray], np.ndarray]] = None,
                 coord_func: Optional[Callable[[np.ndarray], np.ndarray]] = None):
        """
        Args:
            func: image -> image.
            coords_func: ``(N, 2)`` coordinates -> coordinates (``coord_func``: tensorpack's name).
        """
        super().__init__()
        if not callable(func):
            raise TypeError(f"MapImage: func must be callable, got {type(func).__name__}.")
        if coords_func is not None and coord_func is not None:
            raise ValueError("MapImage: give coords_func or coord_func (tensorpack's name), not both.")
        self.func, self.coords_func = func, coords_func if coords_func is not None else coord_func

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


class _CvtColor:
    """``cv2.cvtColor`` by ``code``, keeping a trailing channel axis when asked (picklable)."""

    def __init__(self, code: int, keepdims: bool, repeat: int = 1):
        self.code, self.keepdims, self.repeat = code, keepdims, repeat

    def __call__(self, img):
        out = cv2.cvtColor(img, self.code)
        if self.keepdims and out.ndim == 2:
            out = out[:, :, np.newaxis]
        if self.repeat > 1:
            out = np.concatenate([out] * self.repeat, axis=2)
        return out


class ColorSpace(ImageAugmentor):
    """Convert to another colour space with an OpenCV code (e.g. ``cv2.COLOR_BGR2HSV``).

    With ``keepdims``, a single-channel result keeps a trailing channel axis (HxWx1).

    Example::

        ColorSpace(cv2.COLOR_BGR2HSV).augment(bgr_img)
    """

    def __init__(self, mode: int, keepdims: bool = True):
        super().__init__()
        # an OpenCV code: int(6.5) would be another conversion
        self.mode, self.keepdims = whole_number(mode, f"{type(self).__name__}(mode=...)"), bool(keepdims)

    def get_transform(self, img):
        return PhotometricTransform(_CvtColor(self.mode, self.keepdims), f"ColorSpace({self.mode})")


class Grayscale(ColorSpace):
    """Convert a BGR (or, with ``rgb=True``, RGB) image to grey: HxWx1 with ``keepdims``,
    HxW without, HxWx3 (the grey copied to each channel) with ``keepshape``.

    Example::

        Grayscale(keepshape=True).augment(bgr_img).shape    # (h, w, 3)
    """

    def __init__(self, keepdims: bool = True, rgb: bool = False, keepshape: bool = False):
        if keepshape and not keepdims:
            raise ValueError("Grayscale: keepshape=True needs keepdims=True.")
        super().__init__(cv2.COLOR_RGB2GRAY if rgb else cv2.COLOR_BGR2GRAY, keepdims)
        self.rgb, self.keepshape = bool(rgb), bool(keepshape)

    def get_transform(self, img):
        return PhotometricTransform(_CvtColor(self.mode, self.keepdims, 3 if self.keepshape else 1), "Grayscale")
