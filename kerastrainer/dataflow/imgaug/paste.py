"""Paste the image onto a larger canvas."""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np

from ...utils.casting import whole_number
from ._transforms import Transform
from .base import ImageAugmentor
from .resize import parse_shape

__all__ = ["BackgroundFiller", "ConstantBackgroundFiller", "CenterPaste", "RandomPaste"]


class BackgroundFiller:
    """Makes the canvas an image is pasted on. Subclasses implement ``_fill(shape, img)``.

    Example::

        class NoiseFiller(BackgroundFiller):
            def _fill(self, background_shape, img):
                return np.random.randint(0, 256, background_shape + img.shape[2:]).astype(img.dtype)
    """

    def fill(self, background_shape: Sequence[int], img: np.ndarray) -> np.ndarray:
        """A canvas of ``background_shape = (h, w)`` (plus the image's channels) for ``img``."""
        return self._fill(tuple(whole_number(v, f"{type(self).__name__}.fill(background_shape={background_shape!r})")
                                for v in background_shape), img)

    def _fill(self, background_shape: Tuple[int, int], img: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} does not implement _fill(background_shape, img).")


class ConstantBackgroundFiller(BackgroundFiller):
    """A canvas filled with ``value``, of the image's dtype.

    Example::

        CenterPaste((40, 40), ConstantBackgroundFiller(128))
    """

    def __init__(self, value: float):
        self.value = value

    def _fill(self, background_shape, img):
        return np.full(background_shape + img.shape[2:], self.value, dtype=img.dtype)


class PasteTransform(Transform):
    """Paste onto a canvas from ``filler`` with the image's top-left corner at ``(y0, x0)``."""

    def __init__(self, background_shape, y0: int, x0: int, filler: BackgroundFiller):
        self.background_shape = tuple(whole_number(v, f"PasteTransform(background_shape={background_shape!r})")
                                      for v in background_shape)
        self.y0, self.x0 = whole_number(y0, "PasteTransform(y0=...)"), whole_number(x0, "PasteTransform(x0=...)")
        self.filler = filler

    def apply_image(self, img):
        h, w = img.shape[:2]
        bh, bw = self.background_shape
        if self.y0 + h > bh or self.x0 + w > bw:
            raise ValueError(f"Cannot paste an image of {h}x{w} at ({self.y0}, {self.x0}) on a {bh}x{bw} canvas: "
                             "the canvas must be at least as large as the image.")
        out = self.filler.fill(self.background_shape, img)
        out[self.y0:self.y0 + h, self.x0:self.x0 + w] = img
        return out

    def apply_mask(self, mask):
        return PasteTransform(self.background_shape, self.y0, self.x0, ConstantBackgroundFiller(0)).apply_image(mask)

    def apply_coords(self, coords):
        coords = np.asarray(coords, dtype=np.float32).copy()
        coords[:, 0] += self.x0
        coords[:, 1] += self.y0
        return coords


class CenterPaste(ImageAugmentor):
    """Paste the image at the centre of a ``background_shape = (h, w)`` canvas made by
    ``background_filler`` (default: zeros).

    Example::

        CenterPaste((40, 40)).augment(np.ones((32, 32, 3), np.uint8)).shape   # (40, 40, 3)
    """

    def __init__(self, background_shape, background_filler: Optional[BackgroundFiller] = None):
        super().__init__()
        self.background_shape = parse_shape(background_shape, type(self).__name__, "background_shape")
        self.background_filler = ConstantBackgroundFiller(0) if background_filler is None else background_filler

    def _check(self, img):
        h, w = img.shape[:2]
        bh, bw = self.background_shape
        if bh < h or bw < w:
            raise ValueError(f"{type(self).__name__}: the canvas {bh}x{bw} is smaller than the image {h}x{w}.")
        return bh - h, bw - w

    def get_transform(self, img):
        dh, dw = self._check(img)
        return PasteTransform(self.background_shape, dh // 2, dw // 2, self.background_filler)


class RandomPaste(CenterPaste):
    """Paste the image at a random position of the canvas.

    Example::

        RandomPaste((64, 64)).augment(np.ones((28, 28, 1), np.uint8))
    """

    def get_transform(self, img):
        dh, dw = self._check(img)
        return PasteTransform(self.background_shape, self.rng.randint(0, dh + 1), self.rng.randint(0, dw + 1),
                              self.background_filler)
