"""Resizing augmentors (deterministic given the input size)."""
from __future__ import annotations

import numbers
from typing import Optional, Sequence, Union

import numpy as np

from ...utils import logger
from ...utils.casting import whole_number
from ._transforms import ResizeTransform
from .base import ImageAugmentor

__all__ = ["Resize", "ResizeShortestEdge", "RandomResize"]


def parse_shape(shape: Union[int, Sequence[int]], who: str, what: str = "shape"):
    """``int`` or ``(h, w)`` -> ``(h, w)`` of positive ints, or a clear error.

    Sizes are whole numbers (numpy integers and ``32.0`` are fine); ``32.5`` is an error, not 32."""
    if isinstance(shape, numbers.Real) and not isinstance(shape, (bool, np.bool_)):
        shape = (shape, shape)   # a square; whole_number below refuses 2.5
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__len__") or len(shape) != 2:
        raise ValueError(f"{who}: {what} must be an int or a pair (h, w), got {shape!r}.")
    h, w = (whole_number(v, f"{who}({what}={shape!r}): each size") for v in shape)
    if h <= 0 or w <= 0:
        raise ValueError(f"{who}: {what} must be positive, got {(h, w)}.")
    return h, w


class Resize(ImageAugmentor):
    """Resize every image to a fixed ``(h, w)``.

    Example::

        Resize((224, 224)).augment(img).shape[:2]   # (224, 224)
    """

    def __init__(self, shape: Union[int, Sequence[int]], interp: Optional[int] = None):
        """
        Args:
            shape: ``(h, w)`` or one int for a square.
            interp: an OpenCV interpolation flag; default ``cv2.INTER_LINEAR``.
        """
        super().__init__()
        self.shape = parse_shape(shape, "Resize")
        self.interp = interp

    def get_transform(self, img):
        h, w = img.shape[:2]
        return ResizeTransform(h, w, self.shape[0], self.shape[1], self.interp)


class ResizeShortestEdge(ImageAugmentor):
    """Resize so that the shorter side is ``size``, keeping the aspect ratio.

    Example::

        ResizeShortestEdge(256).augment(np.zeros((300, 600, 3), np.uint8)).shape  # (256, 512, 3)
    """

    def __init__(self, size: int, interp: Optional[int] = None):
        super().__init__()
        self.size = whole_number(size, "ResizeShortestEdge(size=...)", minimum=1)
        self.interp = interp

    def get_transform(self, img):
        h, w = img.shape[:2]
        scale = self.size / min(h, w)
        if h < w:
            new_h, new_w = self.size, int(w * scale + 0.5)
        else:
            new_h, new_w = int(h * scale + 0.5), self.size
        return ResizeTransform(h, w, new_h, new_w, self.interp)


class RandomResize(ImageAugmentor):
    """Resize to a random width and height.

    ``xrange`` / ``yrange`` are ``(low, high)`` ranges of scale factors when floats
    (e.g. ``(0.9, 1.2)``) or of sizes in pixels when ints (e.g. ``(200, 350)``). A draw
    that changes the aspect ratio by more than ``aspect_ratio_thres`` (relative) is
    redrawn (50 times at most, then the image is left as it is); with
    ``aspect_ratio_thres=0`` the aspect ratio is kept and ``yrange`` is unused.
    ``minimum = (xmin, ymin)`` bounds the new size from below.

    Example::

        RandomResize((0.8, 1.2), (0.8, 1.2)).augment(img)
    """

    def __init__(self, xrange, yrange=None, minimum=(0, 0), aspect_ratio_thres: float = 0.15,
                 interp: Optional[int] = None):
        super().__init__()
        if aspect_ratio_thres < 0:
            raise ValueError(f"RandomResize: aspect_ratio_thres must be >= 0, got {aspect_ratio_thres!r}.")

        def is_float(r):
            return isinstance(r[0], float) or isinstance(r[1], float)

        if yrange is None and aspect_ratio_thres > 0:
            raise ValueError("RandomResize: give yrange, or aspect_ratio_thres=0 to keep the aspect ratio.")
        if yrange is not None and is_float(xrange) != is_float(yrange):
            raise ValueError(f"RandomResize: xrange {xrange!r} and yrange {yrange!r} must both be scale factors "
                             "(floats) or both sizes in pixels (ints).")
        if aspect_ratio_thres == 0 and yrange is not None and not is_float(xrange):
            logger.warning("RandomResize: aspect_ratio_thres=0 keeps the aspect ratio; yrange=%r is not used.",
                           yrange)
        self.xrange, self.yrange, self.minimum = tuple(xrange), yrange, tuple(minimum)
        self.aspect_ratio_thres, self.interp = float(aspect_ratio_thres), interp
        self._is_scale = is_float(xrange)

    def _dest_size(self, h, w):
        sx = self._rand_range(*self.xrange)
        if self._is_scale:
            sy = sx if self.aspect_ratio_thres == 0 else self._rand_range(*self.yrange)
            dx, dy = max(sx * w, self.minimum[0]), max(sy * h, self.minimum[1])
        else:
            sy = sx * h / w if self.aspect_ratio_thres == 0 else self._rand_range(*self.yrange)
            dx, dy = max(sx, self.minimum[0]), max(sy, self.minimum[1])
        return max(1, int(dx + 0.5)), max(1, int(dy + 0.5))

    def get_transform(self, img):
        h, w = img.shape[:2]
        for _ in range(50):
            dx, dy = self._dest_size(h, w)
            if self.aspect_ratio_thres > 0:
                old, new = w / h, dx / dy
                if abs(new - old) / old >= self.aspect_ratio_thres + 1e-5:
                    continue
            return ResizeTransform(h, w, dy, dx, self.interp)
        logger.warning("RandomResize: no size within aspect_ratio_thres=%s in 50 draws; image left as it is.",
                       self.aspect_ratio_thres)
        return ResizeTransform(h, w, h, w, self.interp)
