"""Random Gaussian blur."""
from __future__ import annotations

from typing import Optional, Tuple, Union

import numpy as np

from ...utils import logger
from ...utils.casting import whole_number
from ._cv2 import cv2
from .base import PhotometricAugmentor

__all__ = ["GaussianBlur"]


def _whole_pair(r, who: str, name: str):
    try:
        lo, hi = r
    except (TypeError, ValueError):
        raise ValueError(f"{who}: {name} must be a pair (low, high), got {r!r}.") from None
    return tuple(whole_number(v, f"{who}({name}={r!r}): each end") for v in (lo, hi))


class GaussianBlur(PhotometricAugmentor):
    """Blur with a Gaussian window of random size ``2 k + 1``, ``k`` drawn from
    ``size_range`` (``[low, high)``; an int ``n`` means ``(0, n)``), and a random sigma
    from ``sigma_range`` (0: OpenCV's default for the window size). With ``symmetric``
    the same size and sigma are used along x and y.

    Example::

        GaussianBlur(size_range=(0, 3)).augment(img)
    """

    def __init__(self, size_range: Union[int, Tuple[int, int]] = (0, 3),
                 sigma_range: Tuple[float, float] = (0, 0), symmetric: bool = True,
                 max_size: Optional[int] = None):
        """
        Args:
            max_size: tensorpack's deprecated name of ``size_range=(0, max_size)``;
                accepted with a warning.
        """
        super().__init__()
        if max_size is not None:
            logger.warning("GaussianBlur(max_size=%r) is deprecated in tensorpack; using size_range=(0, %r).",
                           max_size, max_size)
            size_range = (0, max_size)
        if not isinstance(size_range, (list, tuple)):
            size_range = (0, size_range)
        lo, hi = _whole_pair(size_range, "GaussianBlur", "size_range")
        if not 0 <= lo < hi:
            raise ValueError(f"GaussianBlur: size_range must satisfy 0 <= low < high, got {size_range!r}.")
        slo, shi = (float(v) for v in sigma_range)
        if not 0 <= slo <= shi:
            raise ValueError(f"GaussianBlur: sigma_range must satisfy 0 <= low <= high, got {sigma_range!r}.")
        self.size_range, self.sigma_range, self.symmetric = (lo, hi), (slo, shi), bool(symmetric)

    def _get_params(self, img):
        size = self.rng.randint(*self.size_range, size=(2,)) * 2 + 1
        sigma = self.rng.uniform(*self.sigma_range, size=(2,))
        if self.symmetric:
            size[1], sigma[1] = size[0], sigma[0]
        return (int(size[0]), int(size[1])), (float(sigma[0]), float(sigma[1]))

    def _apply(self, img, params):
        size, sigma = params
        out = cv2.GaussianBlur(img, size, sigmaX=sigma[0], sigmaY=sigma[1], borderType=cv2.BORDER_REPLICATE)
        return np.reshape(out, img.shape)
