"""A smooth random deformation (tensorpack's GaussianDeform)."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from ...utils.casting import whole_number
from ._cv2 import cv2
from ._transforms import Transform
from .base import ImageAugmentor

__all__ = ["GaussianDeform"]


class _RemapTransform(Transform):
    def __init__(self, map_x: np.ndarray, map_y: np.ndarray):
        self.map_x, self.map_y = map_x, map_y

    def _remap(self, img, interp):
        if img.shape[:2] != self.map_x.shape:
            raise ValueError(f"GaussianDeform was set up for images of {self.map_x.shape} (HxW), got {img.shape}.")
        out = cv2.remap(img, self.map_x, self.map_y, interp, borderMode=cv2.BORDER_REPLICATE)
        if img.ndim == 3 and out.ndim == 2:
            out = out[:, :, np.newaxis]
        return out

    def apply_image(self, img):
        return self._remap(img, cv2.INTER_LINEAR)

    def apply_mask(self, mask):
        return self._remap(mask, cv2.INTER_NEAREST)

    def apply_coords(self, coords):
        raise NotImplementedError("GaussianDeform cannot move coordinates (its warp has no closed-form inverse).")

    def __repr__(self) -> str:
        return f"_RemapTransform({self.map_x.shape})"


class GaussianDeform(ImageAugmentor):
    """Move each pixel by a Gaussian-weighted sum of random offsets at ``anchors``.

    ``anchors``: ``(y, x)`` centres in [0, 1] of the image; ``shape``: the ``(h, w)`` of
    the images (fixed); ``sigma``: the width of each anchor's weight, as a fraction of
    the image; ``randrange``: the largest offset in pixels (default ``h / 8``).
    Sampling is bilinear with the border replicated.

    Example::

        GaussianDeform([(0.2, 0.2), (0.7, 0.2), (0.8, 0.8), (0.5, 0.5), (0.2, 0.5)], (32, 32), 0.2, 3)
    """

    def __init__(self, anchors: Sequence[Sequence[float]], shape: Sequence[int], sigma: float = 0.5,
                 randrange: Optional[float] = None):
        super().__init__()
        self.anchors = np.asarray(anchors, np.float32).reshape(-1, 2)
        self.shape = tuple(whole_number(v, f"GaussianDeform(shape={shape!r}): each size", minimum=1)
                           for v in shape[:2])
        self.sigma = float(sigma)
        self.randrange = self.shape[0] / 8 if randrange is None else float(randrange)
        h, w = self.shape
        yy, xx = np.mgrid[:h, :w].astype(np.float32)
        self._grid = np.stack([yy, xx], axis=-1)                                   # HxWx2 (y, x)
        ny, nx = yy / h, xx / w
        self._weights = np.stack([np.exp(-((ny - ay) ** 2 + (nx - ax) ** 2) / self.sigma)
                                  for ay, ax in self.anchors], axis=-1).astype(np.float32)  # HxWxK

    def get_transform(self, img):
        v = (self.rng.rand(len(self.anchors), 2).astype(np.float32) - 0.5) * 2 * self.randrange
        grid = self._grid + self._weights @ v
        return _RemapTransform(np.ascontiguousarray(grid[..., 1]), np.ascontiguousarray(grid[..., 0]))
