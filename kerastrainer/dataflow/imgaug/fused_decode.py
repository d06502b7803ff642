"""JPEG decode, random-resized crop, colour jitter and flip fused into one step.

The ImageNet training input decodes every JPEG in full, then keeps a random window
of 8-100% of its area resized to 224x224. :class:`DecodeRandomResizedCrop` draws the
window from the JPEG header *before* decoding, so that it can ask libjpeg-turbo (through
OpenCV's ``IMREAD_REDUCED_COLOR_2/4/8``) for a 1/2, 1/4 or 1/8 scale decode whenever the
window, at that scale, is still at least the output size: the resize to the output
would have thrown that resolution away anyway. It then crops, resizes, applies the
fused colour jitter and the flip with no intermediate copies.
"""
from __future__ import annotations

import os
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from ._cv2 import cv2
from ._transforms import FlipTransform, PhotometricTransform, TransformList
from .base import ImageAugmentor
from .crop import GoogleNetRandomCropAndResize
from .jitter import FusedColorJitter

__all__ = ["DecodeRandomResizedCrop", "jpeg_size"]

# start-of-frame markers (0xC0-0xCF except DHT 0xC4, JPG 0xC8, DAC 0xCC) carry the image size
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_STANDALONE = frozenset({0xD8, 0xD9, 0x01} | set(range(0xD0, 0xD8)))
_SCALES = (8, 4, 2)


def jpeg_size(buf: Union[bytes, bytearray, memoryview, np.ndarray]) -> Optional[Tuple[int, int]]:
    """``(height, width)`` from a JPEG's frame header, without decoding; None if ``buf``
    is not a JPEG or its header is cut short.

    Example::

        jpeg_size(open("photo.jpg", "rb").read())     # (375, 500)
    """
    data = buf if isinstance(buf, (bytes, bytearray)) else memoryview(buf).cast("B")
    n = len(data)
    if n < 4 or data[0] != 0xFF or data[1] != 0xD8:
        return None
    pos = 2
    while pos + 4 <= n:
        if data[pos] != 0xFF:
            return None
        code = data[pos + 1]
        if code == 0xFF:          # fill byte
            pos += 1
            continue
        pos += 2
        if code in _STANDALONE:
            continue
        seglen = (data[pos] << 8) | data[pos + 1]
        if code in _SOF:
            if pos + 7 > n:
                return None
            h = (data[pos + 3] << 8) | data[pos + 4]
            w = (data[pos + 5] << 8) | data[pos + 6]
            return (h, w) if h > 0 and w > 0 else None
        if code == 0xDA or seglen < 2:   # a scan before any frame header: not a usable JPEG
            return None
        pos += seglen
    return None


def _ends_with_eoi(arr: np.ndarray) -> bool:
    # 0xFFD9 cannot occur inside entropy-coded data (0xFF there is always followed by 0x00
    # or RSTn), so a buffer ending with it is complete; anything else gets the full check.
    return arr.size >= 2 and arr[-2] == 0xFF and arr[-1] == 0xD9


class DecodeRandomResizedCrop(ImageAugmentor):
    """fb.resnet.torch's ImageNet training augmentation, from JPEG bytes to a uint8 BGR crop.

    ``decode(jpeg_bytes)`` gives the same distribution of outputs as
    ``cv2.imdecode`` followed by ``[GoogleNetRandomCropAndResize, FusedColorJitter,
    Flip(horiz=True)]`` (the training half of :func:`fbresnet_augmentor`), doing less
    work:

    - the crop window is drawn from the size in the JPEG header (same sampling as
      :class:`GoogleNetRandomCropAndResize`: the same random numbers give the same window);
    - when the window at 1/2, 1/4 or 1/8 scale still covers the output size, the JPEG is
      decoded at that scale by libjpeg-turbo (DCT scaling: fewer IDCT, upsampling and
      colour-conversion operations; entropy decoding is the same), then the scaled window
      is resized; otherwise the full image is decoded and the path is the unfused one,
      operation for operation;
    - crop, resize, colour jitter and flip run on the one small output image.

    Truncated JPEGs raise :class:`~kerastrainer.dataflow.BadImageError` (see
    ``is_truncated_jpeg``); other formats (PNG, ...) are decoded in full and augmented
    the same way. Applied to an already decoded image (``augment(img)``, or inside an
    ``AugmentorList``), it is the unfused augmentation.

    Example::

        aug = DecodeRandomResizedCrop(224, interp=cv2.INTER_CUBIC)
        aug.reset_state()
        img = aug.decode(open("n01440764_10026.JPEG", "rb").read())   # (224, 224, 3) uint8 BGR
        img = aug.decode("n01440764_10026.JPEG")                      # or the path
        ds = MapDataComponent(ds, aug, index=0)   # [file name or bytes, label] -> [image, label]
    """

    def __init__(self, target_shape: Union[int, Sequence[int]] = 224,
                 crop_area_fraction: Tuple[float, float] = (0.08, 1.0),
                 aspect_ratio_range: Tuple[float, float] = (0.75, 1.333), interp: Optional[int] = None,
                 color_jitter: Union[bool, FusedColorJitter] = True, flip: bool = True,
                 reduced_decode: bool = True):
        """
        Args:
            target_shape, crop_area_fraction, aspect_ratio_range, interp: as in
                :class:`GoogleNetRandomCropAndResize` (``interp`` defaults to ``cv2.INTER_LINEAR``).
            color_jitter: True for :class:`FusedColorJitter`'s defaults, a configured
                ``FusedColorJitter``, or False for none.
            flip: a random horizontal flip with probability 1/2.
            reduced_decode: allow DCT-scaled decoding (False: always decode in full).
        """
        super().__init__()
        self.crop = GoogleNetRandomCropAndResize(crop_area_fraction, aspect_ratio_range, target_shape, interp)
        if color_jitter is True:
            color_jitter = FusedColorJitter()
        if color_jitter is not False and color_jitter is not None and not isinstance(color_jitter, FusedColorJitter):
            raise TypeError("DecodeRandomResizedCrop: color_jitter must be True, False or a FusedColorJitter, "
                            f"got {type(color_jitter).__name__}.")
        self.jitter = color_jitter or None
        self.flip, self.reduced_decode = bool(flip), bool(reduced_decode)
        self.interp = cv2.INTER_LINEAR if interp is None else interp

    @property
    def target_shape(self) -> Tuple[int, int]:
        return self.crop.target_shape

    def reset_state(self) -> None:
        super().reset_state()
        self.crop.reset_state()
        if self.jitter is not None:
            self.jitter.reset_state()

    # ------------------------------------------------------------------ unfused (decoded input)
    def get_transform(self, img):
        tfms = [self.crop.get_transform(img)]
        th, tw = self.target_shape
        if self.jitter is not None:
            if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
                raise ValueError(f"DecodeRandomResizedCrop's colour jitter needs a uint8 HxWx3 BGR image, "
                                 f"got {img.dtype} {img.shape}.")
            # the jitter's matrix depends on the mean colour of the resized crop
            tfms.append(_LazyJitter(self.jitter))
        if self.flip and self.rng.rand() < 0.5:
            tfms.append(FlipTransform(th, tw, horiz=True))
        return TransformList(tfms)

    # ------------------------------------------------------------------ fused (encoded input)
    def decode(self, data: Union[bytes, bytearray, memoryview, np.ndarray, str, os.PathLike],
               name: str = "<buffer>") -> np.ndarray:
        """Decode ``data`` (the bytes of an image file, or its path) and augment it;
        ``name`` is used in errors."""
        return self.decode_with_params(data, name)[0]

    __call__ = decode

    def decode_with_params(self, data, name: str = "<buffer>") -> Tuple[np.ndarray, dict]:
        """Like :meth:`decode`; also returns what was drawn: ``{'box': (y0, x0, h, w) in
        full-resolution pixels or None (fallback), 'scale': the DCT scale denominator
        (1, 2, 4, 8; 0 when not a JPEG), 'flip': bool}``."""
        from ..image import BadImageError, decode_image, is_truncated_jpeg
        if isinstance(data, (str, os.PathLike)):
            name = os.fspath(data)
            try:
                data = np.fromfile(name, np.uint8)
            except OSError as e:
                raise BadImageError(name, f"cannot read the file ({e.strerror or e}).") from e
        arr = data if isinstance(data, np.ndarray) else np.frombuffer(data, np.uint8)
        arr = arr.reshape(-1).view(np.uint8)
        size = jpeg_size(arr)
        if size is None or (not _ends_with_eoi(arr) and is_truncated_jpeg(arr)):
            # not a JPEG, or a damaged one: the checked full decode, then the unfused path
            img = decode_image(arr, 3, name=name)
            out, _ = self.augment_return_params(img)
            return out, {"box": None, "scale": 0, "flip": None}
        h, w = size
        th, tw = self.target_shape
        box = self.crop.draw_box(h, w)
        if box is not None:
            need_h, need_w = box[2], box[3]
        else:
            nh, nw = self.crop.fallback_size(h, w)
            need_h, need_w = h * th / nh, w * tw / nw   # 1/d allowed iff h/d >= nh and w/d >= nw
        scale = 1
        if self.reduced_decode:
            for d in _SCALES:
                if need_h >= d * th and need_w >= d * tw:
                    scale = d
                    break
        flag = cv2.IMREAD_COLOR if scale == 1 else getattr(cv2, f"IMREAD_REDUCED_COLOR_{scale}")
        img = cv2.imdecode(arr, flag)
        if img is None:
            raise BadImageError(name, "OpenCV could not decode it (corrupt or not an image).")
        rh, rw = -(-h // scale), -(-w // scale)
        if img.shape[:2] != (rh, rw):
            # EXIF orientation turned the image: draw again on what was decoded
            if scale != 1:
                img = cv2.imdecode(arr, cv2.IMREAD_COLOR)
            out, _ = self.augment_return_params(img)
            return out, {"box": None, "scale": 1, "flip": None}
        if box is not None:
            y0, x0, hh, ww = box
            if scale == 1:
                patch = img[y0:y0 + hh, x0:x0 + ww]
            else:   # the window in scaled pixels, rounded to the nearest pixel edge
                ya, yb = int(round(y0 / scale)), min(rh, int(round((y0 + hh) / scale)))
                xa, xb = int(round(x0 / scale)), min(rw, int(round((x0 + ww) / scale)))
                patch = img[ya:yb, xa:xb]
            out = cv2.resize(patch, (tw, th), interpolation=self.interp)
        else:
            nh, nw = self.crop.fallback_size(h, w)
            out = cv2.resize(img, (nw, nh), interpolation=self.interp)
            out = np.ascontiguousarray(out[(nh - th) // 2:(nh - th) // 2 + th, (nw - tw) // 2:(nw - tw) // 2 + tw])
        if self.jitter is not None:
            out = _LazyJitter(self.jitter).apply_image(out)
        flipped = bool(self.flip and self.rng.rand() < 0.5)
        if flipped:
            out = cv2.flip(out, 1)
        return out, {"box": box, "scale": scale, "flip": flipped}


class _LazyJitter(PhotometricTransform):
    """The fused colour jitter, drawn when applied (its matrix needs the image's mean colour)."""

    def __init__(self, jitter: FusedColorJitter):
        super().__init__(self._apply, "FusedColorJitter")
        self.jitter = jitter
        self._tfm: Any = None

    def _apply(self, img):
        if self._tfm is None:
            self._tfm = self.jitter.get_transform(img)
        return self._tfm.apply_image(img)
