"""fb.resnet.torch's colour jitter fused into one affine map of each pixel's colour."""
from __future__ import annotations

import numpy as np

from ._cv2 import cv2
from ._transforms import PhotometricTransform
from .base import ImageAugmentor
from .lighting import Lighting

__all__ = ["FusedColorJitter"]


class _AffineColorMap:
    """``x -> M x + b`` on each pixel of a uint8 image (a picklable transform function)."""

    def __init__(self, mat: np.ndarray):
        self.mat = mat

    def __call__(self, img: np.ndarray) -> np.ndarray:
        return cv2.transform(img, self.mat)

# cv2.COLOR_BGR2GRAY's weights, BGR order: the grey image Contrast and Saturation use
_GRAY_BGR = np.array([0.114, 0.587, 0.299], np.float64)
_GRAY_BGR_T = tuple(float(v) for v in _GRAY_BGR)


class FusedColorJitter(ImageAugmentor):
    """fb.resnet.torch's colour jitter, applied to a uint8 BGR image in one pass.

    The same random transform as ``ToFloat32`` -> ``RandomOrderAug([BrightnessScale,
    Contrast(rgb=False), Saturation(rgb=False), Lighting])`` (all unclipped) ->
    ``ToUint8``, computed
    another way: each of the four operations is an affine map of a pixel's colour
    (``x -> M x + b``; contrast's grey mean is the same affine map of the image's mean
    colour), so their composition in the drawn order is one 3x4 matrix, applied with
    ``cv2.transform`` on the uint8 image (which rounds and saturates to [0, 255]).
    That is one pass over uint8 pixels instead of about ten over float32 copies.

    Example::

        augs = [GoogleNetRandomCropAndResize(target_shape=224), FusedColorJitter(), Flip(horiz=True)]
    """

    def __init__(self, brightness=(0.6, 1.4), contrast=(0.6, 1.4), saturation: float = 0.4,
                 lighting_std: float = 0.1):
        super().__init__()
        self.brightness = tuple(float(v) for v in brightness)
        self.contrast = tuple(float(v) for v in contrast)
        self.saturation = float(saturation)
        self.lighting_std = float(lighting_std)
        light = Lighting(lighting_std, bgr=True)  # ImageNet's colour PCA, BGR order, [0, 255] scale
        self._eigval, self._eigvec = light.eigval.astype(np.float64), light.eigvec.astype(np.float64)

    def draw_ops(self) -> list:
        """The random operations of one image, in their drawn order: ``[(name, value), ...]``."""
        rng = self.rng
        ops = []
        for op in rng.permutation(4):
            if op == 0:
                ops.append(("brightness", rng.uniform(*self.brightness)))
            elif op == 1:
                ops.append(("contrast", rng.uniform(*self.contrast)))
            elif op == 2:
                ops.append(("saturation", 1.0 + rng.uniform(-self.saturation, self.saturation)))
            else:
                ops.append(("lighting", rng.randn(3) * self.lighting_std))
        return ops

    def compose(self, ops, mean_bgr) -> np.ndarray:
        """The 3x4 affine colour map of ``ops`` for an image whose mean colour is ``mean_bgr``."""
        # Plain Python floats: per image, a dozen tiny numpy calls cost more than cv2.transform.
        gb, gg, gr = _GRAY_BGR_T
        m = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
        b = [0.0, 0.0, 0.0]
        mean = [float(v) for v in mean_bgr[:3]]
        for name, value in ops:
            if name == "brightness":    # x * a
                a = float(value)
                m = [[a * v for v in row] for row in m]
                b = [a * v for v in b]
            elif name == "contrast":    # (x - g) * r + g, g: the grey mean of the current image
                r = float(value)
                cur = [sum(m[i][k] * mean[k] for k in range(3)) + b[i] for i in range(3)]
                g = gb * cur[0] + gg * cur[1] + gr * cur[2]
                m = [[r * v for v in row] for row in m]
                b = [r * v + (1.0 - r) * g for v in b]
            elif name == "saturation":  # v x + (1 - v) grey(x), on every row of the map
                v = float(value)
                grey_row = [gb * m[0][k] + gg * m[1][k] + gr * m[2][k] for k in range(3)]
                grey_b = gb * b[0] + gg * b[1] + gr * b[2]
                m = [[v * m[i][k] + (1.0 - v) * grey_row[k] for k in range(3)] for i in range(3)]
                b = [v * b[i] + (1.0 - v) * grey_b for i in range(3)]
            else:                       # PCA lighting: x + eigvec @ (alpha * eigval)
                inc = self._eigvec @ (np.asarray(value, np.float64) * self._eigval)
                b = [b[i] + float(inc[i]) for i in range(3)]
        return np.array([m[0] + [b[0]], m[1] + [b[1]], m[2] + [b[2]]], np.float32)

    def get_transform(self, img):
        if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
            raise ValueError(f"FusedColorJitter needs a uint8 HxWx3 BGR image, got {img.dtype} {img.shape}.")
        mat = self.compose(self.draw_ops(), cv2.mean(img)[:3])
        return PhotometricTransform(_AffineColorMap(mat), "FusedColorJitter")
