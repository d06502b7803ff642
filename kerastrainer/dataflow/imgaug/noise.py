"""Noise: JPEG re-compression, Gaussian, salt and pepper."""
from __future__ import annotations

from typing import Tuple

import numpy as np

from ._cv2 import cv2
from .blur import _whole_pair
from .base import PhotometricAugmentor

__all__ = ["JpegNoise", "GaussianNoise", "SaltPepperNoise"]


class JpegNoise(PhotometricAugmentor):
    """Re-encode the image as JPEG at a random quality drawn from ``quality_range``
    (``[low, high)``) and decode it again. The result has the input's dtype and shape.
    JPEG holds uint8 levels: other images are rounded and clipped to [0, 255] first
    (a float image in [0, 1] would become 0s and 1s, so that warns once, as do
    values outside [0, 255]).

    Example::

        JpegNoise((40, 100)).augment(img)
    """

    def __init__(self, quality_range: Tuple[int, int] = (40, 100)):
        super().__init__()
        lo, hi = _whole_pair(quality_range, "JpegNoise", "quality_range")
        if not 0 <= lo < hi <= 101:
            raise ValueError(f"JpegNoise: quality_range must satisfy 0 <= low < high <= 101, got {quality_range!r}.")
        self.quality_range = (lo, hi)

    def _get_params(self, img):
        return int(self.rng.randint(*self.quality_range))

    def _apply(self, img, quality):
        src = self._quantise_to_uint8(img)
        ok, enc = cv2.imencode(".jpg", src, [cv2.IMWRITE_JPEG_QUALITY, quality])
        if not ok:
            raise ValueError(f"JpegNoise: OpenCV could not encode an image of shape {img.shape} as JPEG.")
        out = cv2.imdecode(enc, cv2.IMREAD_UNCHANGED)
        return self._from_uint8_levels(out.reshape(img.shape), img.dtype)


class GaussianNoise(PhotometricAugmentor):
    """Add independent ``N(0, sigma^2)`` noise to every value. uint8 results are clipped
    to [0, 255]; float results too unless ``clip=False``.

    Example::

        GaussianNoise(sigma=8).augment(img)
    """

    def __init__(self, sigma: float = 1, clip: bool = True):
        super().__init__()
        if float(sigma) < 0:
            raise ValueError(f"GaussianNoise: sigma must be >= 0, got {sigma!r}.")
        self.sigma, self.clip = float(sigma), bool(clip)

    def _get_params(self, img):
        return self.rng.randn(*img.shape).astype(np.float32)

    def _impl(self, img, noise):
        if noise.shape != img.shape:
            raise ValueError(f"GaussianNoise was drawn for shape {noise.shape}, applied to shape {img.shape}.")
        img += noise * self.sigma
        return img


class SaltPepperNoise(PhotometricAugmentor):
    """Set each value (each channel of each pixel independently) to 255 with
    probability ``white_prob`` and to 0 with probability ``black_prob``.

    Example::

        SaltPepperNoise(white_prob=0.02, black_prob=0.02).augment(img)
    """

    def __init__(self, white_prob: float = 0.05, black_prob: float = 0.05):
        super().__init__()
        w, b = float(white_prob), float(black_prob)
        if w < 0 or b < 0 or w + b > 1:
            raise ValueError("SaltPepperNoise: white_prob and black_prob must be >= 0 with a sum <= 1, "
                             f"got {white_prob!r} and {black_prob!r}.")
        self.white_prob, self.black_prob = w, b

    def _get_params(self, img):
        return self.rng.uniform(0, 1, size=img.shape)

    def _apply(self, img, u):
        if u.shape != img.shape:
            raise ValueError(f"SaltPepperNoise was drawn for shape {u.shape}, applied to shape {img.shape}.")
        out = img.copy()
        out[u > 1 - self.white_prob] = 255
        out[u < self.black_prob] = 0
        return out
