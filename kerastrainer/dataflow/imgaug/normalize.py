"""Per-image value normalisation and clipping."""
from __future__ import annotations

import numpy as np

from .base import PhotometricAugmentor

__all__ = ["MeanVarianceNormalize", "MinMaxNormalize", "Clip"]


class MeanVarianceNormalize(PhotometricAugmentor):
    """``x -> (x - mean) / max(std, 1 / sqrt(number of values))``: zero mean, unit
    variance, over the whole image (``all_channel=True``) or per channel. Returns float32.

    Example::

        MeanVarianceNormalize(all_channel=False).augment(img)
    """

    def __init__(self, all_channel: bool = True):
        super().__init__()
        self.all_channel = bool(all_channel)

    def _get_params(self, img):
        return None

    def _apply(self, img, _):
        img = img.astype(np.float32)
        axis = None if self.all_channel or img.ndim == 2 else (0, 1)
        mean = np.mean(img, axis=axis, keepdims=axis is not None)
        std = np.std(img, axis=axis, keepdims=axis is not None)
        std = np.maximum(std, 1.0 / np.sqrt(img.size))
        return ((img - mean) / std).astype(np.float32)


class MinMaxNormalize(PhotometricAugmentor):
    """Scale values linearly to ``[min, max]``, over the whole image or per channel.
    Returns float32; a constant image (or channel) becomes ``min``.

    Example::

        MinMaxNormalize(0, 1).augment(img)
    """

    def __init__(self, min: float = 0, max: float = 255, all_channel: bool = True):  # noqa: A002
        super().__init__()
        if float(max) < float(min):
            raise ValueError(f"MinMaxNormalize: max must be >= min, got min={min!r}, max={max!r}.")
        self.min, self.max, self.all_channel = float(min), float(max), bool(all_channel)

    def _get_params(self, img):
        return None

    def _apply(self, img, _):
        img = img.astype(np.float32)
        axis = None if self.all_channel or img.ndim == 2 else (0, 1)
        lo = np.min(img, axis=axis, keepdims=axis is not None)
        span = np.max(img, axis=axis, keepdims=axis is not None) - lo
        scale = np.where(span > 0, (self.max - self.min) / np.where(span > 0, span, 1), 0)
        return ((img - lo) * scale + self.min).astype(np.float32)


class Clip(PhotometricAugmentor):
    """Clip values to ``[min, max]``, keeping the dtype.

    Example::

        Clip(0, 255).augment(float_img)
    """

    def __init__(self, min: float = 0, max: float = 255):  # noqa: A002 (tensorpack's names)
        super().__init__()
        self.min, self.max = min, max

    def _get_params(self, img):
        return None

    def _apply(self, img, _):
        return np.clip(img, self.min, self.max).astype(img.dtype, copy=False)
