"""Cropping augmentors: random, central, and the Inception-style random crop + resize."""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple, Union

import numpy as np

from ...utils import logger
from ...utils.casting import whole_number
from ._transforms import CropTransform, PhotometricTransform, ResizeTransform, TransformList
from .base import ImageAugmentor
from .resize import parse_shape

__all__ = ["RandomCrop", "CenterCrop", "GoogleNetRandomCropAndResize", "RandomCropRandomShape", "RandomCutout"]


def _check_fits(img, crop_h: int, crop_w: int, who: str) -> None:
    h, w = img.shape[:2]
    if h < crop_h or w < crop_w:
        raise ValueError(f"{who}: cannot crop {crop_h}x{crop_w} (HxW) from an image of {h}x{w}. "
                         "Resize first (e.g. ResizeShortestEdge) or use a smaller crop.")


def sample_crop_box(h: int, w: int, area_fraction: Tuple[float, float], aspect_ratio_range: Tuple[float, float],
                    rng, attempts: int = 10) -> Optional[Tuple[int, int, int, int]]:
    """The Inception-style random window ``(y0, x0, hh, ww)`` of an ``h x w`` image, or None.

    The area is a uniform fraction of the image's, the aspect ratio log-uniform (so r
    and 1/r are equally likely), width and height swapped with probability 1/2; a draw
    that does not fit is retried, up to ``attempts`` times. Shared by
    :class:`GoogleNetRandomCropAndResize` and the fused decoder, so both draw the same
    windows from the same random numbers.
    """
    area = h * w
    log_lo, log_hi = (math.log(r) for r in aspect_ratio_range)
    for _ in range(attempts):
        target_area = rng.uniform(*area_fraction) * area
        ratio = math.exp(rng.uniform(log_lo, log_hi))
        ww = int(round(math.sqrt(target_area * ratio)))
        hh = int(round(math.sqrt(target_area / ratio)))
        if rng.uniform() < 0.5:
            ww, hh = hh, ww
        if 0 < hh <= h and 0 < ww <= w:
            y0 = rng.randint(0, h - hh + 1)
            x0 = rng.randint(0, w - ww + 1)
            return y0, x0, hh, ww
    return None


class RandomCrop(ImageAugmentor):
    """Crop a window of ``crop_shape`` at a uniformly random position.

    Example::

        RandomCrop((28, 28)).augment(np.zeros((32, 32, 3), np.uint8)).shape   # (28, 28, 3)
    """

    def __init__(self, crop_shape: Union[int, Sequence[int]]):
        super().__init__()
        self.crop_shape = parse_shape(crop_shape, "RandomCrop", "crop_shape")

    def get_transform(self, img):
        ch, cw = self.crop_shape
        _check_fits(img, ch, cw, "RandomCrop")
        h, w = img.shape[:2]
        y0 = self.rng.randint(0, h - ch + 1)
        x0 = self.rng.randint(0, w - cw + 1)
        return CropTransform(y0, x0, ch, cw)


class CenterCrop(ImageAugmentor):
    """Crop the central window of ``crop_shape``.

    Example::

        CenterCrop(224).augment(np.zeros((256, 300, 3), np.uint8)).shape   # (224, 224, 3)
    """

    def __init__(self, crop_shape: Union[int, Sequence[int]]):
        super().__init__()
        self.crop_shape = parse_shape(crop_shape, "CenterCrop", "crop_shape")

    def get_transform(self, img):
        ch, cw = self.crop_shape
        _check_fits(img, ch, cw, "CenterCrop")
        h, w = img.shape[:2]
        return CropTransform((h - ch) // 2, (w - cw) // 2, ch, cw)


class GoogleNetRandomCropAndResize(ImageAugmentor):
    """The Inception / fb.resnet.torch training crop: a random window covering a
    random fraction of the area with a random aspect ratio, resized to ``target_shape``.

    After 10 failed draws it falls back to resizing the shortest edge to the target
    and cropping the centre.

    Example::

        aug = GoogleNetRandomCropAndResize(target_shape=224)
        aug.augment(np.zeros((375, 500, 3), np.uint8)).shape    # (224, 224, 3)
    """

    def __init__(self, crop_area_fraction: Tuple[float, float] = (0.08, 1.0),
                 aspect_ratio_range: Tuple[float, float] = (0.75, 1.333),
                 target_shape: Union[int, Sequence[int]] = 224, interp: Optional[int] = None):
        super().__init__()
        lo, hi = (float(v) for v in crop_area_fraction)
        if not 0 < lo <= hi <= 1:
            raise ValueError("GoogleNetRandomCropAndResize: crop_area_fraction must satisfy "
                             f"0 < low <= high <= 1, got {crop_area_fraction!r}.")
        rlo, rhi = (float(v) for v in aspect_ratio_range)
        if not 0 < rlo <= rhi:
            raise ValueError("GoogleNetRandomCropAndResize: aspect_ratio_range must satisfy "
                             f"0 < low <= high, got {aspect_ratio_range!r}.")
        self.crop_area_fraction = (lo, hi)
        self.aspect_ratio_range = (rlo, rhi)
        self.target_shape = parse_shape(target_shape, "GoogleNetRandomCropAndResize", "target_shape")
        self.interp = interp

    def draw_box(self, h: int, w: int) -> Optional[Tuple[int, int, int, int]]:
        """Draw the crop window ``(y0, x0, hh, ww)`` for an ``h x w`` image, or None when
        10 draws all failed (then the shortest-edge fallback applies)."""
        return sample_crop_box(h, w, self.crop_area_fraction, self.aspect_ratio_range, self.rng)

    def fallback_size(self, h: int, w: int) -> Tuple[int, int]:
        """The size the whole image is resized to before the central crop, when no box was found."""
        th, tw = self.target_shape
        scale = max(th / h, tw / w)
        return max(th, int(h * scale + 0.5)), max(tw, int(w * scale + 0.5))

    def get_transform(self, img):
        h, w = img.shape[:2]
        th, tw = self.target_shape
        box = self.draw_box(h, w)
        if box is not None:
            y0, x0, hh, ww = box
            return TransformList([CropTransform(y0, x0, hh, ww),
                                  ResizeTransform(hh, ww, th, tw, self.interp)])
        # Fallback: resize the shorter side to the target, then take the centre.
        nh, nw = self.fallback_size(h, w)
        return TransformList([ResizeTransform(h, w, nh, nw, self.interp),
                              CropTransform((nh - th) // 2, (nw - tw) // 2, th, tw)])


class RandomCropRandomShape(ImageAugmentor):
    """Crop a window of random height in ``[hmin, hmax]`` and width in ``[wmin, wmax]``
    (both inclusive; a missing max is the image's size) at a uniformly random position.

    Example::

        RandomCropRandomShape(wmin=20, hmin=20).augment(img)
    """

    def __init__(self, wmin: int, hmin: int, wmax: Optional[int] = None, hmax: Optional[int] = None,
                 max_aspect_ratio: Optional[float] = None):
        """
        Args:
            max_aspect_ratio: never implemented by tensorpack either; accepted with a warning.
        """
        super().__init__()
        if max_aspect_ratio is not None:
            logger.warning("RandomCropRandomShape(max_aspect_ratio=%r) has no effect (as in tensorpack).",
                           max_aspect_ratio)
        who = "RandomCropRandomShape"
        self.wmin = whole_number(wmin, f"{who}(wmin=...)")
        self.hmin = whole_number(hmin, f"{who}(hmin=...)")
        self.wmax = None if wmax is None else whole_number(wmax, f"{who}(wmax=...)")
        self.hmax = None if hmax is None else whole_number(hmax, f"{who}(hmax=...)")
        if self.wmin <= 0 or self.hmin <= 0:
            raise ValueError(f"RandomCropRandomShape: wmin and hmin must be positive, got {wmin!r}, {hmin!r}.")

    def get_transform(self, img):
        h, w = img.shape[:2]
        hmax = h if self.hmax is None else self.hmax
        wmax = w if self.wmax is None else self.wmax
        if not (self.hmin <= hmax <= h and self.wmin <= wmax <= w):
            raise ValueError(f"RandomCropRandomShape: cannot crop [{self.hmin}, {hmax}] x [{self.wmin}, {wmax}] "
                             f"(HxW) from an image of {h}x{w}.")
        ch = self.rng.randint(self.hmin, hmax + 1)
        cw = self.rng.randint(self.wmin, wmax + 1)
        return CropTransform(self.rng.randint(0, h - ch + 1), self.rng.randint(0, w - cw + 1), ch, cw)


class _Cutout:
    def __init__(self, y0, x0, h, w, fill):
        self.y0, self.x0, self.h, self.w, self.fill = y0, x0, h, w, fill

    def __call__(self, img):
        out = img.copy()
        out[self.y0:self.y0 + self.h, self.x0:self.x0 + self.w] = self.fill
        return out


def _size_or_range(r, name: str):
    """RandomCutout's ``int`` or ``[low, high)`` of whole numbers."""
    what = f"RandomCutout({name}={r!r})"
    if isinstance(r, (list, tuple, np.ndarray)):
        if len(r) != 2:
            raise ValueError(f"{what}: give an int or a pair (low, high).")
        lo, hi = (whole_number(v, f"{what}: each end") for v in r)
        if not 0 <= lo < hi:
            raise ValueError(f"{what}: the range [low, high) must satisfy 0 <= low < high.")
        return lo, hi
    return whole_number(r, what, minimum=0)


class RandomCutout(ImageAugmentor):
    """Cutout (DeVries and Taylor, 2017): fill a random rectangle with ``fill``.

    ``h_range`` / ``w_range``: the rectangle's height / width, an int or a ``[low, high)`` range.

    Example::

        RandomCutout(8, 8).augment(img)
    """

    def __init__(self, h_range: Union[int, Tuple[int, int]], w_range: Union[int, Tuple[int, int]],
                 fill: float = 0.0):
        super().__init__()
        # sizes are whole numbers: rng.randint would truncate (2.5, 4) to [2, 4) silently
        self.h_range = _size_or_range(h_range, "h_range")
        self.w_range = _size_or_range(w_range, "w_range")
        self.fill = fill

    def _draw(self, r):
        return r if isinstance(r, int) else int(self.rng.randint(*r))

    def get_transform(self, img):
        ch, cw = self._draw(self.h_range), self._draw(self.w_range)
        h, w = img.shape[:2]
        if ch > h or cw > w:
            raise ValueError(f"RandomCutout: a {ch}x{cw} rectangle does not fit in an image of {h}x{w}.")
        y0, x0 = self.rng.randint(0, h - ch + 1), self.rng.randint(0, w - cw + 1)
        return PhotometricTransform(_Cutout(y0, x0, ch, cw, self.fill), "RandomCutout")
