"""Colour jitter: brightness, contrast, saturation, hue and gamma.

Values are taken to be on the [0, 255] scale (uint8 images, or float images made
by ``ToFloat32``). uint8 in gives uint8 out, clipped; float results are clipped to
[0, 255] unless ``clip=False``.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from ._cv2 import cv2
from .base import PhotometricAugmentor, _to_float, restore_dtype

__all__ = ["Brightness", "BrightnessScale", "Contrast", "Saturation", "Hue", "Gamma"]


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


class Hue(PhotometricAugmentor):
    """Rotate the hue by a random offset drawn from ``range``, in OpenCV's 8-bit hue
    units (0-180 is the full circle; ``(-90, 90)`` covers every shift).

    uint8 images go through OpenCV's 8-bit HSV; other images through its float32 HSV
    (hue in degrees, so the offset is doubled), which works on any value scale. The
    result has the input's dtype: other integer images are rounded back (never
    truncated), and a float64 image with values beyond float32's range is an error.

    Example::

        Hue((-10, 10), rgb=False).augment(bgr_img)
    """

    def __init__(self, range: Tuple[float, float] = (0, 180), rgb: bool = True):  # noqa: A002 (tensorpack's name)
        super().__init__()
        self.range, self.rgb = _check_range(range, "Hue", "range"), bool(rgb)

    def _get_params(self, img):
        _check_three_channels(img, "Hue")
        return float(self._rand_range(*self.range))

    def _apply(self, img, hue):
        to_hsv, from_hsv = ((cv2.COLOR_RGB2HSV, cv2.COLOR_HSV2RGB) if self.rgb
                            else (cv2.COLOR_BGR2HSV, cv2.COLOR_HSV2BGR))
        if img.dtype == np.uint8:
            hsv = cv2.cvtColor(img, to_hsv)
            hsv[..., 0] = ((hsv[..., 0].astype(np.int32) + int(round(hue))) % 180).astype(np.uint8)
            return cv2.cvtColor(hsv, from_hsv)
        with np.errstate(over="ignore"):   # float64 beyond float32: caught by restore_dtype
            hsv = cv2.cvtColor(_to_float(img), to_hsv)
        hsv[..., 0] = (hsv[..., 0] + 2 * hue) % 360
        # rounded (astype would truncate 999.99994 to 999) and never silently overflowed;
        # clip=False: the hue leaves the value range alone, whatever its scale
        return restore_dtype(cv2.cvtColor(hsv, from_hsv), img.dtype, False, self, src=img)


class Gamma(PhotometricAugmentor):
    """Gamma correction ``x -> 255 (x / 255) ** (1 / (1 + g))`` with ``g`` drawn from
    ``range``, through a lookup table on the image rounded to uint8 (tensorpack's
    behaviour); the result has the input's dtype. Images must be on the [0, 255]
    scale: a float image in [0, 1] would become 0s and 1s, so that warns (once), as
    do values outside [0, 255], which are clipped.

    Example::

        Gamma((-0.3, 0.3)).augment(img)
    """

    def __init__(self, range: Tuple[float, float] = (-0.5, 0.5)):  # noqa: A002 (tensorpack's name)
        super().__init__()
        lo, hi = _check_range(range, "Gamma", "range")
        if lo <= -1:
            raise ValueError(f"Gamma: range must stay above -1 (the exponent is 1 / (1 + g)), got {range!r}.")
        self.range = (lo, hi)

    def _get_params(self, img):
        return float(self._rand_range(*self.range))

    def _apply(self, img, gamma):
        lut = ((np.arange(256, dtype=np.float32) / 255) ** (1.0 / (1.0 + gamma)) * 255).astype(np.uint8)
        src = self._quantise_to_uint8(img)
        out = cv2.LUT(src, lut)
        if img.ndim == 3 and out.ndim == 2:
            out = out[:, :, np.newaxis]
        return self._from_uint8_levels(out, img.dtype)
