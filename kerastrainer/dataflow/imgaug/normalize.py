"""Per-image value normalisation and clipping."""
from __future__ import annotations

import numpy as np

from .base import PhotometricAugmentor, _float_bounds

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

    The bounds are taken in the image's dtype: on an integer image ``Clip(0.5, 99.5)``
    keeps ``[1, 99]``; a bound beyond the dtype's range clips nothing on that side; a
    range that no value of the dtype lies in (``Clip(1e6, 1e7)`` on float16) is an error.
    None leaves that side open.

    Example::

        Clip(0, 255).augment(float_img)
    """

    def __init__(self, min: float = 0, max: float = 255):  # noqa: A002 (tensorpack's names)
        super().__init__()
        self.min, self.max = min, max

    def _get_params(self, img):
        return None

    def _apply(self, img, _):
        lo, hi = _bounds_in(img.dtype, self.min, self.max)
        return np.clip(img, lo, hi)


def _bounds_in(dtype: np.dtype, lo, hi):
    """Clip's bounds (scalars or per-channel arrays, None for an open side) as values of ``dtype``
    that keep exactly the values of ``dtype`` inside them: ``np.clip(uint8, 0.5, 99.5)`` would
    compute in float64 and truncate 0.5 back to 0, and a float16 bound of 1e6 would be inf."""
    if dtype.kind not in "iuf":
        return lo, hi
    if dtype.kind in "iu":
        dmin, dmax = _float_bounds(dtype)
    else:
        dmax = float(np.finfo(dtype).max)
        dmin = -dmax
    bounds = []
    for v, name in ((lo, "min"), (hi, "max")):
        a = None if v is None else np.asarray(v, np.float64)
        if a is not None and np.isnan(a).any():
            raise ValueError(f"Clip({name}={v!r}): NaN is not a bound; give a number or None (no bound).")
        bounds.append(a)
    a_lo, a_hi = bounds
    if a_lo is not None:
        a_lo = np.maximum(a_lo, dmin)   # past the dtype's range: no bound on that side
        a_lo = np.ceil(a_lo) if dtype.kind in "iu" else a_lo
    if a_hi is not None:
        a_hi = np.minimum(a_hi, dmax)
        a_hi = np.floor(a_hi) if dtype.kind in "iu" else a_hi
    empty = (a_lo is not None and (a_lo > dmax).any()) or (a_hi is not None and (a_hi < dmin).any())
    if a_lo is not None and a_hi is not None and dtype.kind in "iu":   # Clip(2.2, 2.8) on uint8
        empty = empty or ((np.asarray(lo, np.float64) <= np.asarray(hi, np.float64)) & (a_lo > a_hi)).any()
    if empty:
        raise ValueError(f"Clip(min={lo!r}, max={hi!r}): no {dtype.name} value lies in that range "
                         f"({dtype.name} holds [{dmin:g}, {dmax:g}]); the result cannot keep the image's dtype.")
    return tuple(None if a is None else a.astype(dtype) for a in (a_lo, a_hi))
