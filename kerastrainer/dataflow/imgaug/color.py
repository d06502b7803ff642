"""Colour jitter: brightness, contrast and saturation.

Values are taken to be on the [0, 255] scale (uint8 images, or float images made
by ``ToFloat32``). uint8 in gives uint8 out, clipped; float results are clipped to
[0, 255] unless ``clip=False``.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from ._cv2 import cv2
from .base import PhotometricAugmentor

__all__ = ["Brightness", "BrightnessScale", "Contrast", "Saturation"]


def _check_range(r, who: str, name: str) -> Tuple[float, float]:
    try:
        lo, hi = (float(v) for v in r)
    except (TypeError, ValueError):
        raise ValueError(f"{who}: {name} must be a pair (low, high), got {r!r}.") from None
    if lo > hi:
        raise ValueError(f"{who}: {name} must have low <= high, got {r!r}.")
    return lo, hi


def _gray(img: np.ndarray, rgb: bool) -> np.ndarray:
    return cv2.cvtColor(img, cv2.COLOR_RGB2GRAY if rgb else cv2.COLOR_BGR2GRAY)


def _check_three_channels(img: np.ndarray, who: str) -> None:
    if img.ndim != 3 or img.shape[2] != 3:
        raise ValueError(f"{who} needs a 3-channel colour image, got shape {img.shape}.")


class Brightness(PhotometricAugmentor):
    """Add a random value drawn from ``[-delta, delta]`` to every pixel.

    Example::

        Brightness(30).augment(img)
    """

    def __init__(self, delta: float, clip: bool = True):
        super().__init__()
        if float(delta) < 0:
            raise ValueError(f"Brightness: delta must be >= 0, got {delta!r}.")
        self.delta, self.clip = float(delta), bool(clip)

    def _get_params(self, img):
        return float(self._rand_range(-self.delta, self.delta))

    def _impl(self, img, v):
        img += v
        return img


class BrightnessScale(PhotometricAugmentor):
    """Multiply every pixel by a random factor drawn from ``range``.

    Example::

        BrightnessScale((0.6, 1.4)).augment(img)
    """

    def __init__(self, range: Tuple[float, float], clip: bool = True):  # noqa: A002 (tensorpack's name)
        super().__init__()
        self.range, self.clip = _check_range(range, "BrightnessScale", "range"), bool(clip)

    def _get_params(self, img):
        return float(self._rand_range(*self.range))

    def _impl(self, img, v):
        img *= v
        return img


class Contrast(PhotometricAugmentor):
    """Scale the distance of each pixel from the image mean by a random factor.

    With ``rgb=None`` the mean is taken per channel; with ``rgb=True`` / ``False``
    it is the mean of the grey image computed from RGB / BGR channel order.

    Example::

        Contrast((0.6, 1.4), rgb=False).augment(bgr_img)
    """

    def __init__(self, factor_range: Tuple[float, float], rgb: Optional[bool] = None, clip: bool = True):
        super().__init__()
        self.factor_range = _check_range(factor_range, "Contrast", "factor_range")
        self.rgb, self.clip = rgb, bool(clip)

    def _get_params(self, img):
        return float(self._rand_range(*self.factor_range))

    def _impl(self, img, r):
        if self.rgb is not None and img.ndim == 3 and img.shape[2] == 3:
            mean = float(np.mean(_gray(img, self.rgb)))
        else:
            mean = np.mean(img, axis=(0, 1), keepdims=True)
        img -= mean
        img *= r
        img += mean
        return img


class Saturation(PhotometricAugmentor):
    """Blend a colour image with its grey version by a random amount in ``[-alpha, alpha]``.

    ``rgb`` gives the channel order (``False`` for OpenCV's BGR).

    Example::

        Saturation(0.4, rgb=False).augment(bgr_img)
    """

    def __init__(self, alpha: float = 0.4, rgb: bool = True, clip: bool = True):
        super().__init__()
        if not 0 <= float(alpha) <= 1:
            raise ValueError(f"Saturation: alpha must be in [0, 1], got {alpha!r}.")
        self.alpha, self.rgb, self.clip = float(alpha), bool(rgb), bool(clip)

    def _get_params(self, img):
        _check_three_channels(img, "Saturation")
        return float(1 + self._rand_range(-self.alpha, self.alpha))

    def _impl(self, img, v):
        grey = _gray(img, self.rgb)[:, :, np.newaxis]
        img *= v
        img += grey * (1 - v)
        return img
