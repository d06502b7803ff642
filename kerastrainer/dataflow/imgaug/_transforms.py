"""Deterministic transforms: the result of drawing an augmentor's random parameters once.

An :class:`ImageAugmentor` draws a :class:`Transform` from an image; the
transform can then be replayed on other components of the same datapoint (a
segmentation mask, a second view, keypoints) so that all of them move together.

Coordinates are float arrays of shape ``(N, 2)`` holding ``(x, y)`` in pixel
units, where pixel ``(row i, column j)`` covers ``[j, j+1) x [i, i+1)``: the
image's top-left corner is ``(0, 0)`` and its bottom-right corner is ``(w, h)``.

Example::

    t = CropTransform(y0=10, x0=20, h=100, w=100)
    patch = t.apply_image(img)
    mask_patch = t.apply_mask(mask)
    pts = t.apply_coords(np.array([[25.0, 30.0]]))   # -> [[5., 20.]]
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

from ...utils.casting import whole_number
from ._cv2 import cv2

__all__ = ["Transform", "NoOpTransform", "TransformList", "ResizeTransform", "CropTransform",
           "FlipTransform", "PhotometricTransform", "FunctionTransform", "TransformFactory",
           "WarpAffineTransform", "TransposeTransform", "LazyTransform"]


def _check_size(img: np.ndarray, h: int, w: int, what: str) -> None:
    if img.shape[:2] != (h, w):
        raise ValueError(
            f"{what} was drawn for an image of size {h}x{w} (HxW) but is applied to an array of "
            f"shape {img.shape}. Components transformed together must have the same height and width.")


class Transform:
    """A deterministic operation on an image, its masks and its coordinates.

    Subclasses implement :meth:`apply_image` and :meth:`apply_coords`.
    :meth:`apply_mask` defaults to :meth:`apply_image`; geometric transforms that
    interpolate override it with nearest-neighbour so that labels stay labels,
    and photometric transforms leave masks unchanged.
    """

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} does not implement apply_image")

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} does not implement apply_coords")

    def apply_mask(self, mask: np.ndarray) -> np.ndarray:
        return self.apply_image(mask)

    def _init(self, params: Optional[dict] = None) -> None:
        """tensorpack's idiom ``self._init(locals())``: keep the constructor's arguments."""
        for k, v in (params or {}).items():
            if k != "self" and not k.startswith("_"):
                setattr(self, k, v)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"


class NoOpTransform(Transform):
    """Returns its input unchanged."""

    def apply_image(self, img):
        return img

    def apply_coords(self, coords):
        return coords

    def apply_mask(self, mask):
        return mask


class TransformList(Transform):
    """Several transforms applied in order."""

    def __init__(self, transforms: Sequence[Transform]):
        self.transforms = list(transforms)

    @property
    def tfms(self):
        """tensorpack's name of :attr:`transforms`."""
        return self.transforms

    def __add__(self, other):
        return TransformList(self.transforms + (other.transforms if isinstance(other, TransformList) else [other]))

    def __radd__(self, other):
        return TransformList((other.transforms if isinstance(other, TransformList) else [other]) + self.transforms)

    def apply_image(self, img):
        for t in self.transforms:
            img = t.apply_image(img)
        return img

    def apply_coords(self, coords):
        for t in self.transforms:
            coords = t.apply_coords(coords)
        return coords

    def apply_mask(self, mask):
        for t in self.transforms:
            mask = t.apply_mask(mask)
        return mask


def _sizes(who: str, **sizes) -> list:
    """Pixel sizes and offsets as ints; ``int()`` would cut a 2.5 to 2 without saying so."""
    return [whole_number(v, f"{who}({k}=...)") for k, v in sizes.items()]


def _resize(img: np.ndarray, new_h: int, new_w: int, interp: int) -> np.ndarray:
    out = cv2.resize(img, (new_w, new_h), interpolation=interp)
    if img.ndim == 3 and out.ndim == 2:  # cv2 drops a trailing channel axis of size 1
        out = out[:, :, np.newaxis]
    return out


class ResizeTransform(Transform):
    """Resize an ``h x w`` image to ``new_h x new_w``."""

    def __init__(self, h: int, w: int, new_h: int, new_w: int, interp: Optional[int] = None):
        self.h, self.w, self.new_h, self.new_w = _sizes("ResizeTransform", h=h, w=w, new_h=new_h, new_w=new_w)
        self.interp = cv2.INTER_LINEAR if interp is None else interp

    def apply_image(self, img):
        _check_size(img, self.h, self.w, "ResizeTransform")
        return _resize(img, self.new_h, self.new_w, self.interp)

    def apply_mask(self, mask):
        _check_size(mask, self.h, self.w, "ResizeTransform")
        return _resize(mask, self.new_h, self.new_w, cv2.INTER_NEAREST)

    def apply_coords(self, coords):
        coords = np.asarray(coords, dtype=np.float32).copy()
        coords[:, 0] *= self.new_w / self.w
        coords[:, 1] *= self.new_h / self.h
        return coords


class CropTransform(Transform):
    """Keep the ``h x w`` window whose top-left pixel is ``(y0, x0)``."""

    def __init__(self, y0: int, x0: int, h: int, w: int):
        self.y0, self.x0, self.h, self.w = _sizes("CropTransform", y0=y0, x0=x0, h=h, w=w)

    def apply_image(self, img):
        if img.shape[0] < self.y0 + self.h or img.shape[1] < self.x0 + self.w:
            raise ValueError(f"CropTransform window y0={self.y0}, x0={self.x0}, h={self.h}, w={self.w} "
                             f"does not fit in an array of shape {img.shape}.")
        return img[self.y0:self.y0 + self.h, self.x0:self.x0 + self.w]

    def apply_coords(self, coords):
        coords = np.asarray(coords, dtype=np.float32).copy()
        coords[:, 0] -= self.x0
        coords[:, 1] -= self.y0
        return coords


class FlipTransform(Transform):
    """Mirror an ``h x w`` image left-right (``horiz``) and/or top-bottom (``vert``).

    ``vert`` defaults to ``not horiz``, so tensorpack's ``FlipTransform(h, w, False)``
    is a vertical flip, as there.
    """

    def __init__(self, h: int, w: int, horiz: bool = True, vert: Optional[bool] = None):
        (self.h, self.w), self.horiz = _sizes("FlipTransform", h=h, w=w), bool(horiz)
        self.vert = (not self.horiz) if vert is None else bool(vert)

    def apply_image(self, img):
        _check_size(img, self.h, self.w, "FlipTransform")
        if self.horiz and self.vert:
            code = -1
        elif self.horiz:
            code = 1
        elif self.vert:
            code = 0
        else:
            return img
        out = cv2.flip(img, code)
        if img.ndim == 3 and out.ndim == 2:
            out = out[:, :, np.newaxis]
        return out

    def apply_coords(self, coords):
        coords = np.asarray(coords, dtype=np.float32).copy()
        if self.horiz:
            coords[:, 0] = self.w - coords[:, 0]
        if self.vert:
            coords[:, 1] = self.h - coords[:, 1]
        return coords


class PhotometricTransform(Transform):
    """Change pixel values only: coordinates and masks pass through unchanged."""

    def __init__(self, func: Callable[[np.ndarray], np.ndarray], name: Optional[str] = None):
        self.func = func
        self.name = name

    def apply_image(self, img):
        return self.func(img)

    def apply_coords(self, coords):
        return coords

    def apply_mask(self, mask):
        return mask

    def __repr__(self) -> str:
        return f"PhotometricTransform({self.name or self.func!r})"


class FunctionTransform(Transform):
    """Apply user functions to images (and to coordinates, when one is given)."""

    def __init__(self, image_func: Callable[[np.ndarray], np.ndarray],
                 coords_func: Optional[Callable[[np.ndarray], np.ndarray]] = None,
                 mask_func: Optional[Callable[[np.ndarray], np.ndarray]] = None):
        self.image_func, self.coords_func, self.mask_func = image_func, coords_func, mask_func

    def apply_image(self, img):
        return self.image_func(img)

    def apply_mask(self, mask):
        return (self.mask_func or self.image_func)(mask)

    def apply_coords(self, coords):
        if self.coords_func is None:
            raise NotImplementedError(
                f"The image function {self.image_func!r} has no coordinate function; pass "
                "coords_func=... to MapImage to transform coordinates too.")
        return self.coords_func(coords)


class TransformFactory(Transform):
    """A transform made of user functions given by name (tensorpack's API).

    Example::

        t = TransformFactory(name="invert", apply_image=lambda im: 255 - im,
                             apply_coords=lambda c: c)
    """

    def __init__(self, name: Optional[str] = None, **kwargs: Callable):
        for k, v in kwargs.items():
            if not k.startswith("apply_"):
                raise KeyError(f"TransformFactory: unknown argument {k!r}; give apply_image=, apply_coords=, "
                               "apply_mask=... functions.")
            setattr(self, k, v)
        self.name = name

    def __repr__(self) -> str:
        return f"TransformFactory({self.name or ''})"


class WarpAffineTransform(Transform):
    """``cv2.warpAffine`` by the 2x3 matrix ``mat`` into an image of ``dsize = (w, h)``.

    Masks are warped with nearest-neighbour interpolation; coordinates by the same matrix.

    Example::

        t = WarpAffineTransform(cv2.getRotationMatrix2D((50, 40), 30, 1.0), (100, 80))
        out, pts = t.apply_image(img), t.apply_coords(pts)
    """

    def __init__(self, mat, dsize, interp: Optional[int] = None, borderMode: Optional[int] = None,  # noqa: N803
                 borderValue=0):  # noqa: N803 (tensorpack's argument names)
        self.mat = np.asarray(mat, dtype=np.float32).reshape(2, 3)
        self.dsize = tuple(whole_number(v, f"WarpAffineTransform(dsize={dsize!r})") for v in dsize[:2])
        self.interp = cv2.INTER_LINEAR if interp is None else interp
        self.borderMode = cv2.BORDER_CONSTANT if borderMode is None else borderMode
        self.borderValue = borderValue

    def _warp(self, img, interp):
        out = cv2.warpAffine(img, self.mat, self.dsize, flags=interp, borderMode=self.borderMode,
                             borderValue=self.borderValue)
        if img.ndim == 3 and out.ndim == 2:
            out = out[:, :, np.newaxis]
        return out

    def apply_image(self, img):
        return self._warp(img, self.interp)

    def apply_mask(self, mask):
        return self._warp(mask, cv2.INTER_NEAREST)

    def apply_coords(self, coords):
        # OpenCV puts pixel centres at integers, this module at integer + 0.5
        coords = np.asarray(coords, dtype=np.float32) - 0.5
        out = np.concatenate([coords, np.ones((coords.shape[0], 1), np.float32)], axis=1) @ self.mat.T
        return (out + 0.5).astype(np.float32)


class TransposeTransform(Transform):
    """Swap the image's height and width axes (and x and y of coordinates).

    Example::

        TransposeTransform().apply_image(np.zeros((2, 3, 1))).shape   # (3, 2, 1)
    """

    def apply_image(self, img):
        out = cv2.transpose(img)
        if img.ndim == 3 and out.ndim == 2:
            out = out[:, :, np.newaxis]
        return out

    def apply_coords(self, coords):
        return np.asarray(coords, dtype=np.float32)[:, ::-1].copy()


class LazyTransform(Transform):
    """A transform drawn from the first image it is applied to (``get_transform(img)``);
    later calls, and coordinates and masks after that, replay it.

    Example::

        t = LazyTransform(CenterCrop(32).get_transform)
        out = t.apply_image(img)              # drawn from img here
        pts = t.apply_coords(pts)             # the same crop
    """

    def __init__(self, get_transform: Callable[[np.ndarray], Transform]):
        self.get_transform = get_transform
        self._transform: Optional[Transform] = None

    def apply_image(self, img):
        if self._transform is None:
            self._transform = self.get_transform(img)
        return self._transform.apply_image(img)

    def _drawn(self, what: str) -> Transform:
        if self._transform is None:
            raise RuntimeError(f"LazyTransform.{what} was called before the transform was applied to an image; "
                               "apply_image first.")
        return self._transform

    def apply_coords(self, coords):
        return self._drawn("apply_coords").apply_coords(coords)

    def apply_mask(self, mask):
        return self._drawn("apply_mask").apply_mask(mask)

    def __repr__(self) -> str:
        return repr(self._transform) if self._transform is not None else f"LazyTransform({self.get_transform!r})"
