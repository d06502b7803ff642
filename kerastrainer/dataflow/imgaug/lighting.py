"""AlexNet-style PCA lighting noise."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from .base import PhotometricAugmentor

__all__ = ["Lighting", "IMAGENET_EIGVAL", "IMAGENET_EIGVEC"]

# Principal components of ImageNet pixel colours, in RGB order, on the [0, 1] scale
# (from fb.resnet.torch; the same numbers tensorpack's ImageNet example uses).
IMAGENET_EIGVAL = np.array([0.2175, 0.0188, 0.0045], dtype=np.float32)
IMAGENET_EIGVEC = np.array([[-0.5675, 0.7192, 0.4009],
                            [-0.5808, -0.0045, -0.8140],
                            [-0.5836, -0.6948, 0.4203]], dtype=np.float32)


class Lighting(PhotometricAugmentor):
    """Add ``eigvec @ (eigval * N(0, std))`` to every pixel (one draw per image).

    Without ``eigval`` / ``eigvec`` it uses ImageNet's colour PCA, scaled to
    [0, 255], in BGR order when ``bgr=True`` (images decoded by OpenCV) and in RGB
    order otherwise. Custom ``eigval`` / ``eigvec`` are used as given.

    Example::

        Lighting(0.1).augment(bgr_uint8_img)
    """

    def __init__(self, std: float, eigval: Optional[Sequence[float]] = None,
                 eigvec: Optional[Sequence[Sequence[float]]] = None, bgr: bool = True, clip: bool = True):
        super().__init__()
        if float(std) < 0:
            raise ValueError(f"Lighting: std must be >= 0, got {std!r}.")
        if (eigval is None) != (eigvec is None):
            raise ValueError("Lighting: give both eigval and eigvec, or neither (ImageNet's).")
        if eigval is None:
            eigval, eigvec = IMAGENET_EIGVAL * 255.0, IMAGENET_EIGVEC
            if bgr:  # reverse the channel axis of the vectors and keep the pairing of val and vec
                eigval, eigvec = eigval[::-1], eigvec[::-1, ::-1]
        self.eigval = np.asarray(eigval, dtype=np.float32)
        self.eigvec = np.asarray(eigvec, dtype=np.float32)
        n = self.eigval.shape[0]
        if self.eigval.ndim != 1 or self.eigvec.shape != (n, n):
            raise ValueError(f"Lighting: eigval must have shape (C,) and eigvec (C, C); got "
                             f"{self.eigval.shape} and {self.eigvec.shape}.")
        self.std, self.clip = float(std), bool(clip)

    def _get_params(self, img):
        channels = img.shape[2] if img.ndim == 3 else 1
        if channels != self.eigval.shape[0]:
            raise ValueError(f"Lighting has {self.eigval.shape[0]} eigenvalues but the image has "
                             f"{channels} channel(s) (shape {img.shape}).")
        return self.rng.randn(self.eigval.shape[0]) * self.std

    def _impl(self, img, v):
        inc = self.eigvec @ (v * self.eigval)
        img += inc.astype(np.float32)
        return img
