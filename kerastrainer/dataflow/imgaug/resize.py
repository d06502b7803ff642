"""Resizing augmentors (deterministic given the input size)."""
from __future__ import annotations

from typing import Optional, Sequence, Union

from .base import ImageAugmentor
from .transform import ResizeTransform

__all__ = ["Resize", "ResizeShortestEdge"]


def parse_shape(shape: Union[int, Sequence[int]], who: str, what: str = "shape"):
    """``int`` or ``(h, w)`` -> ``(h, w)`` of positive ints, or a clear error."""
    if isinstance(shape, (int,)) and not isinstance(shape, bool):
        shape = (shape, shape)
    try:
        h, w = (int(v) for v in shape)
    except (TypeError, ValueError):
        raise ValueError(f"{who}: {what} must be an int or a pair (h, w), got {shape!r}.") from None
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
        if int(size) <= 0:
            raise ValueError(f"ResizeShortestEdge: size must be positive, got {size!r}.")
        self.size = int(size)
        self.interp = interp

    def get_transform(self, img):
        h, w = img.shape[:2]
        scale = self.size / min(h, w)
        if h < w:
            new_h, new_w = self.size, int(w * scale + 0.5)
        else:
            new_h, new_w = int(h * scale + 0.5), self.size
        return ResizeTransform(h, w, new_h, new_w, self.interp)
