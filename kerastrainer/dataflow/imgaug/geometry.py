"""Geometric augmentors: shift, rotation, affine warps, transpose."""
from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

from ._cv2 import cv2
from ._transforms import CropTransform, NoOpTransform, TransformList, TransposeTransform, WarpAffineTransform
from .base import ImageAugmentor

__all__ = ["Shift", "Rotation", "RotationAndCropValid", "Affine", "Transpose"]


def _border(border: Optional[int]) -> int:
    return cv2.BORDER_REPLICATE if border is None else border


class Shift(ImageAugmentor):
    """Shift by a random whole number of pixels, up to ``horiz_frac`` of the width and
    ``vert_frac`` of the height either way; the uncovered border is filled by ``border``
    (default ``cv2.BORDER_REPLICATE``; ``border_value`` with ``cv2.BORDER_CONSTANT``).

    Example::

        Shift(horiz_frac=0.1, vert_frac=0.1).augment(img)
    """

    def __init__(self, horiz_frac: float = 0, vert_frac: float = 0, border: Optional[int] = None,
                 border_value=0):
        super().__init__()
        if not (0 <= horiz_frac < 1 and 0 <= vert_frac < 1):
            raise ValueError(f"Shift: horiz_frac and vert_frac must be in [0, 1), got {horiz_frac!r}, {vert_frac!r}.")
        self.horiz_frac, self.vert_frac = float(horiz_frac), float(vert_frac)
        self.border, self.border_value = _border(border), border_value

    def get_transform(self, img):
        max_dx, max_dy = self.horiz_frac * img.shape[1], self.vert_frac * img.shape[0]
        dx = np.round(self._rand_range(-max_dx, max_dx))
        dy = np.round(self._rand_range(-max_dy, max_dy))
        mat = np.array([[1, 0, dx], [0, 1, dy]], np.float32)
        return WarpAffineTransform(mat, img.shape[1::-1], borderMode=self.border, borderValue=self.border_value)


def _angle(aug, max_deg, step_deg):
    deg = aug._rand_range(-max_deg, max_deg)
    if step_deg:
        deg = deg // step_deg * step_deg
    return float(deg)


def _check_step(max_deg, step_deg, who):
    if step_deg is not None and not (max_deg == 180 and 180 % step_deg == 0):
        raise ValueError(f"{who}: step_deg needs max_deg=180 and must divide 180, got max_deg={max_deg!r}, "
                         f"step_deg={step_deg!r}.")


class Rotation(ImageAugmentor):
    """Rotate by a random angle in ``[-max_deg, max_deg]`` around a random centre, drawn
    as a fraction in ``center_range`` of the width and height. With ``step_deg`` (and
    ``max_deg=180``) the angle is a multiple of ``step_deg``.

    Example::

        Rotation(15).augment(img)
    """

    def __init__(self, max_deg: float, center_range: Tuple[float, float] = (0, 1), interp: Optional[int] = None,
                 border: Optional[int] = None, step_deg: Optional[float] = None, border_value=0):
        super().__init__()
        _check_step(max_deg, step_deg, "Rotation")
        self.max_deg, self.center_range, self.step_deg = float(max_deg), tuple(center_range), step_deg
        self.interp, self.border, self.border_value = interp, _border(border), border_value

    def get_transform(self, img):
        center = np.array(img.shape[1::-1], np.float64) * self._rand_range(*self.center_range, size=(2,))
        deg = _angle(self, self.max_deg, self.step_deg)
        # pixel centres sit at integer + 0.5 in our coordinates; OpenCV's at integers
        mat = cv2.getRotationMatrix2D((float(center[0]) - 0.5, float(center[1]) - 0.5), deg, 1)
        return WarpAffineTransform(mat, img.shape[1::-1], self.interp, self.border, self.border_value)


class RotationAndCropValid(ImageAugmentor):
    """Rotate around the centre by a random angle, then crop the largest axis-aligned
    rectangle with no border in it (the output size varies).

    Example::

        RotationAndCropValid(10).augment(img)
    """

    def __init__(self, max_deg: float, interp: Optional[int] = None, step_deg: Optional[float] = None):
        super().__init__()
        _check_step(max_deg, step_deg, "RotationAndCropValid")
        self.max_deg, self.interp, self.step_deg = float(max_deg), interp, step_deg

    def get_transform(self, img):
        deg = _angle(self, self.max_deg, self.step_deg)
        h, w = img.shape[:2]
        cx, cy = w * 0.5, h * 0.5
        rot = WarpAffineTransform(cv2.getRotationMatrix2D((cx - 0.5, cy - 0.5), deg, 1), (w, h), self.interp)
        nw, nh = self.largest_rotated_rect(w, h, deg)
        nw, nh = max(1, min(nw, w)), max(1, min(nh, h))
        return TransformList([rot, CropTransform(int(cy - nh * 0.5), int(cx - nw * 0.5), nh, nw)])

    @staticmethod
    def largest_rotated_rect(w: int, h: int, angle: float) -> Tuple[int, int]:
        """``(width, height)`` of the largest axis-aligned rectangle inside a ``w x h``
        rectangle rotated by ``angle`` degrees."""
        if w <= 0 or h <= 0:
            return 0, 0
        a = math.radians(angle)
        long_w = w >= h
        side_long, side_short = (w, h) if long_w else (h, w)
        sin_a, cos_a = abs(math.sin(a)), abs(math.cos(a))
        if side_short <= 2.0 * sin_a * cos_a * side_long or abs(sin_a - cos_a) < 1e-10:
            x = 0.5 * side_short   # two corners touch the longer side
            wr, hr = (x / sin_a, x / cos_a) if long_w else (x / cos_a, x / sin_a)
        else:                      # all four corners touch the sides
            cos_2a = cos_a * cos_a - sin_a * sin_a
            wr, hr = (w * cos_a - h * sin_a) / cos_2a, (h * cos_a - w * sin_a) / cos_2a
        return int(np.round(wr)), int(np.round(hr))


class Affine(ImageAugmentor):
    """A random affine warp around the image centre: scale in ``scale = (a, b)``,
    translation up to ``translate_frac = (fx, fy)`` of the width and height, rotation
    up to ``rotate_max_deg`` and shear up to ``shear`` degrees, each either way.

    Example::

        Affine(scale=(0.9, 1.1), translate_frac=(0.1, 0.1), rotate_max_deg=10, shear=5).augment(img)
    """

    def __init__(self, scale: Optional[Tuple[float, float]] = None,
                 translate_frac: Optional[Tuple[float, float]] = None, rotate_max_deg: float = 0.0,
                 shear: float = 0.0, interp: Optional[int] = None, border: Optional[int] = None, border_value=0):
        super().__init__()
        for name, v in (("scale", scale), ("translate_frac", translate_frac)):
            if v is not None and (not isinstance(v, (tuple, list)) or len(v) != 2):
                raise ValueError(f"Affine: {name} must be a pair of floats (a, b), got {v!r}.")
        if not 0.0 <= float(shear) < 180:
            raise ValueError(f"Affine: shear must be in [0, 180) degrees, got {shear!r}.")
        self.scale = None if scale is None else tuple(scale)
        self.translate_frac = None if translate_frac is None else tuple(translate_frac)
        self.rotate_max_deg, self.shear = float(rotate_max_deg), float(shear)
        self.interp, self.border, self.border_value = interp, _border(border), border_value

    def get_transform(self, img):
        scale = self._rand_range(*self.scale) if self.scale is not None else 1.0
        dx = dy = 0.0
        if self.translate_frac is not None:
            max_dx, max_dy = self.translate_frac[0] * img.shape[1], self.translate_frac[1] * img.shape[0]
            dx, dy = np.round(self._rand_range(-max_dx, max_dx)), np.round(self._rand_range(-max_dy, max_dy))
        center = (img.shape[1] * 0.5 - 0.5, img.shape[0] * 0.5 - 0.5)
        deg = self._rand_range(-self.rotate_max_deg, self.rotate_max_deg)
        mat = cv2.getRotationMatrix2D(center, float(deg), float(scale))
        if self.shear > 0.0:
            sh = math.radians(self._rand_range(-self.shear, self.shear))
            m00, m01, m10, m11 = mat[0, 0], mat[0, 1], mat[1, 0], mat[1, 1]
            mat[0, 1] = m01 * math.cos(sh) + m00 * math.sin(sh)
            mat[1, 1] = m11 * math.cos(sh) + m10 * math.sin(sh)
            # keep the centre where it is
            mat[0, 2] = center[0] * (1.0 - m00) - center[1] * mat[0, 1]
            mat[1, 2] = -center[0] * m10 + center[1] * (1.0 - mat[1, 1])
        mat[0, 2] += dx
        mat[1, 2] += dy
        return WarpAffineTransform(mat, img.shape[1::-1], self.interp, self.border, self.border_value)


class Transpose(ImageAugmentor):
    """Swap height and width with probability ``prob``.

    Example::

        Transpose(prob=0.5).augment(img)
    """

    def __init__(self, prob: float = 0.5):
        super().__init__()
        if not 0.0 <= float(prob) <= 1.0:
            raise ValueError(f"Transpose: prob must be in [0, 1], got {prob!r}.")
        self.prob = float(prob)

    def get_transform(self, img):
        return TransposeTransform() if self.rng.rand() < self.prob else NoOpTransform()
