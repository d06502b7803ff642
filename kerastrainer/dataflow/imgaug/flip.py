"""Random mirroring."""
from __future__ import annotations

from typing import Optional

from ._transforms import FlipTransform, NoOpTransform
from .base import ImageAugmentor

__all__ = ["Flip"]


class Flip(ImageAugmentor):
    """Mirror the image with probability ``prob``.

    ``horiz`` flips left-right, ``vert`` top-bottom; with both set, each is drawn
    independently. ``Flip()`` flips left-right; ``Flip(vert=True)`` only top-bottom
    (as in tensorpack).

    Example::

        Flip(horiz=True, prob=0.5).augment(img)
    """

    def __init__(self, horiz: Optional[bool] = None, vert: bool = False, prob: float = 0.5):
        super().__init__()
        if horiz is None:
            horiz = not vert
        if not (horiz or vert):
            raise ValueError("Flip: set horiz=True and/or vert=True; with neither it would do nothing.")
        if not 0.0 <= float(prob) <= 1.0:
            raise ValueError(f"Flip: prob must be in [0, 1], got {prob!r}.")
        self.horiz, self.vert, self.prob = bool(horiz), bool(vert), float(prob)

    def get_transform(self, img):
        do_h = self.horiz and self.rng.rand() < self.prob
        do_v = self.vert and self.rng.rand() < self.prob
        if not (do_h or do_v):
            return NoOpTransform()
        h, w = img.shape[:2]
        return FlipTransform(h, w, horiz=do_h, vert=do_v)
