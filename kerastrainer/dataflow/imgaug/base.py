"""The augmentor base classes.

An :class:`ImageAugmentor` owns a random generator and, given an image, draws a
:class:`~kerastrainer.dataflow.imgaug.transform.Transform`: a deterministic
operation that can be replayed on other components (a mask, coordinates).

Example::

    aug = Flip(horiz=True)
    aug.reset_state()                       # once per process (reseeds self.rng)
    out = aug.augment(img)                  # draw and apply in one go
    out, tfm = aug.augment_return_params(img)
    mask_out = tfm.apply_mask(mask)         # the same flip, replayed
"""
from __future__ import annotations

import inspect
import os
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from ...utils import logger
from ...utils.casting import check_cast_keeps_values
from ...utils.rng import get_rng
from ._transforms import FunctionTransform, LazyTransform, PhotometricTransform, Transform, TransformList


class _CallWithParam:
    """``x -> func(x, param)``, the parameter passed by position whatever the method named
    it (tensorpack's ``_augment(img, v)``), and picklable, unlike a lambda."""

    def __init__(self, func, param):
        self.func, self.param = func, param

    def __call__(self, x):
        return self.func(x, self.param)


def _identity_coords(coords):
    return coords

__all__ = ["ImageAugmentor", "Augmentor", "PhotometricAugmentor"]


def check_image(img: Any, who: str) -> None:
    """Raise a clear error unless ``img`` is an HxW or HxWxC numpy array."""
    if not isinstance(img, np.ndarray):
        raise TypeError(f"{who} expects a numpy array image, got {type(img).__name__}.")
    if img.ndim not in (2, 3):
        raise ValueError(f"{who} expects an image of shape HxW or HxWxC, got shape {img.shape}.")


class ImageAugmentor:
    """Base class: draw a random :class:`Transform` from an image.

    Subclasses implement :meth:`get_transform`. Each augmentor has its own
    ``self.rng`` (a numpy RandomState), reseeded by :meth:`reset_state`, which
    every DataFlow that uses augmentors calls once per process (and
    ``fix_rng_seed`` makes runs repeat). Used in a new process without
    ``reset_state()`` (e.g. in the map function of a parallel map), the rng
    reseeds itself on first use, so that workers never repeat each other's draws.

    Example::

        class RandomInvert(ImageAugmentor):
            def get_transform(self, img):
                if self.rng.rand() < 0.5:
                    return PhotometricTransform(lambda im: 255 - im, "invert")
                return NoOpTransform()
    """

    def __init__(self):
        self.rng = get_rng(self)

    @property
    def rng(self) -> np.random.RandomState:
        """This augmentor's random generator, reseeded on first use in a new process."""
        # A forked or spawned worker that never called reset_state() (e.g. inside a
        # map function) would otherwise repeat the parent's draws in every worker.
        if getattr(self, "_rng_pid", None) != os.getpid():
            self.rng = get_rng(self)
        return self._rng

    @rng.setter
    def rng(self, value: np.random.RandomState) -> None:
        self._rng = value
        self._rng_pid = os.getpid()

    def reset_state(self) -> None:
        """Reseed ``self.rng``; call once per process before use."""
        self.rng = get_rng(self)

    def _warn_once(self, key: str, msg: str, *args: Any) -> None:
        """Log ``msg % args`` as a warning, once per augmentor instance and ``key``."""
        warned = self.__dict__.setdefault("_warned_keys", set())
        if key not in warned:
            warned.add(key)
            logger.warning(msg, *args)

    def _quantise_to_uint8(self, img: np.ndarray) -> np.ndarray:
        """``img`` as uint8 levels (rounded, clipped to [0, 255]) for augmentors that work on
        uint8 only (``Gamma``, ``JpegNoise``), as tensorpack does; warns (once) when that
        destroys the image: a float image in [0, 1], or values outside [0, 255]."""
        if img.dtype == np.uint8:
            return img
        who = type(self).__name__
        if img.size:
            lo, hi = img.min(), img.max()
            if img.dtype.kind == "f" and 0 < hi <= 1.0 and lo >= 0:
                self._warn_once("unit_float", "%s: an image of dtype %s with values in [0, 1] is quantised "
                                "to uint8 levels in [0, 255], which leaves only 0 and 1; scale it to "
                                "[0, 255] first.", who, img.dtype)
            elif lo < 0 or hi > 255:
                self._warn_once("out_of_range", "%s: an image of dtype %s has values outside [0, 255]; "
                                "they are clipped to [0, 255] (it works on uint8 levels).", who, img.dtype)
        return np.rint(np.clip(img, 0, 255)).astype(np.uint8)

    def _from_uint8_levels(self, out: np.ndarray, dtype: np.dtype) -> np.ndarray:
        """The uint8 result of an augmentor that works on uint8 levels, in the input's ``dtype``;
        an error where that dtype cannot hold it (int8 wraps 200 to -56)."""
        dtype = np.dtype(dtype)
        who = type(self).__name__
        check_cast_keeps_values(out, dtype, f"{who} (it works on uint8 levels 0..255, which {dtype.name} cannot "
                                            f"all hold; give it a uint8 image)")
        return out.astype(dtype, copy=False)

    def _init(self, params: Optional[dict] = None) -> None:
        """tensorpack's idiom ``self._init(locals())``: store the constructor's arguments
        as attributes (all but ``self`` and names starting with ``_``)."""
        for k, v in (params or {}).items():
            if k != "self" and not k.startswith("_"):
                setattr(self, k, v)

    def get_transform(self, img: np.ndarray) -> Transform:
        """Draw the random parameters for ``img`` and return them as a Transform.

        Augmentors written for tensorpack's older API work unchanged through this
        default: ``_get_augment_params(img)`` (or ``get_augment_params``) draws the
        parameter, ``_augment(img, param)`` applies it (the parameter is passed by
        position, so any name works) and ``_augment_coords(coords, param)``, when
        defined, moves coordinates (without it coordinates pass unchanged, tensorpack's
        old default). A ``_get_augment_params`` that returns a Transform is used as is.
        """
        augment = getattr(self, "_augment", None)
        if augment is None:
            raise NotImplementedError(f"{type(self).__name__} implements neither get_transform nor _augment.")
        get_params = getattr(self, "_get_augment_params", None) or getattr(self, "get_augment_params", None)
        param = get_params(img) if get_params is not None else None
        if isinstance(param, Transform):
            return param
        coords = getattr(self, "_augment_coords", None)
        return FunctionTransform(_CallWithParam(augment, param),
                                 _CallWithParam(coords, param) if coords is not None else _identity_coords)

    def augment(self, img: np.ndarray) -> np.ndarray:
        """Draw a transform for ``img`` and apply it."""
        return self.augment_return_params(img)[0]

    def augment_return_params(self, img: np.ndarray) -> Tuple[np.ndarray, Transform]:
        """Augment ``img``; also return the transform, to replay it on other components."""
        check_image(img, type(self).__name__)
        tfm = self.get_transform(img)
        return tfm.apply_image(img), tfm

    def augment_with_params(self, img: np.ndarray, tfm: Transform) -> np.ndarray:
        """Replay a transform returned by :meth:`augment_return_params` on another image."""
        return tfm.apply_image(img)

    def augment_coords(self, coords: np.ndarray, tfm: Transform) -> np.ndarray:
        """Replay a transform on ``(N, 2)`` ``(x, y)`` coordinates."""
        return tfm.apply_coords(coords)

    def _rand_range(self, low: float = 1.0, high: Optional[float] = None, size=None):
        """Uniform sample in ``[low, high)``; with one argument, in ``[0, low)``."""
        if high is None:
            low, high = 0.0, low
        return self.rng.uniform(low, high, size)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items()
                           if not k.startswith("_") and k != "rng")
        return f"{type(self).__name__}({fields})"


def _to_float(img: np.ndarray) -> np.ndarray:
    return img.astype(np.float32) if img.dtype != np.float32 else img.copy()


def _float_bounds(dtype: np.dtype) -> Tuple[float, float]:
    """The widest float64 interval whose values all cast into integer ``dtype`` without wrapping."""
    info = np.iinfo(dtype)
    lo, hi = np.float64(info.min), np.float64(info.max)
    if int(hi) > info.max:  # 2**63 - 1 and 2**64 - 1 round up in float64
        hi = np.nextafter(hi, -np.inf)
    return float(lo), float(hi)


def restore_dtype(out: np.ndarray, old_dtype: np.dtype, clip: bool, who: Optional["ImageAugmentor"] = None,
                  src: Optional[np.ndarray] = None) -> np.ndarray:
    """Bring a float32 result back to the input's dtype.

    uint8 is rounded and clipped to [0, 255]; float is clipped to [0, 255] when ``clip``
    (tensorpack's rules). Other integer dtypes are rounded and clipped to their own
    dtype's range (never wrapped, whatever ``clip``); when ``clip`` is false and that
    changes a value, ``who`` (the augmentor) warns once. A float result that is not
    clipped must stay finite where the input ``src`` (when given; else ``out``) was finite
    everywhere: a float16 result beyond 65504, or a float32 computation that overflowed,
    is a ValueError naming ``who``, never a silent inf.
    """
    old_dtype = np.dtype(old_dtype)
    if old_dtype == np.uint8:
        np.clip(out, 0, 255, out=out)
        return np.rint(out, out=out).astype(np.uint8)
    if old_dtype.kind in "iu":
        lo, hi = _float_bounds(old_dtype)
        if old_dtype.itemsize >= 4 or out.dtype.kind != "f":
            out = out.astype(np.float64)  # float32 cannot hold the bounds of int32 and wider
        np.rint(out, out=out)
        if not clip and who is not None and out.size and (out.min() < lo or out.max() > hi):
            who._warn_once("saturate", "%s: results outside the range of %s are clipped to [%d, %d] "
                           "(clip=False, but %s cannot hold them).", type(who).__name__, old_dtype,
                           int(lo), int(hi), old_dtype)
        np.clip(out, lo, hi, out=out)
        return out.astype(old_dtype)
    if clip:
        np.clip(out, 0, 255, out=out)
        return out.astype(old_dtype, copy=False)
    with np.errstate(over="ignore"):
        result = out.astype(old_dtype, copy=False)
    if old_dtype.kind == "f" and result.size and not np.isfinite(result).all():
        _check_overflow(result, out, out if src is None else src, who)
    return result


def _check_overflow(result: np.ndarray, out: np.ndarray, src: np.ndarray, who: Optional["ImageAugmentor"]):
    """Raise for a non-finite ``result`` that finite input ``src`` does not explain."""
    if src.dtype.kind == "f" and not np.isfinite(src).all():
        return   # inf or NaN in the input: its own, carried through as numpy would
    name = type(who).__name__ if who is not None else "The augmentor"
    bad = int(np.flatnonzero(~np.isfinite(result))[0])
    at = tuple(int(j) for j in np.unravel_index(bad, result.shape))
    dtype, became = result.dtype, float(result.flat[bad])
    # Hue and the like have no clip argument to suggest
    clip = "Use clip=True (clips to [0, 255]), or" if who is not None and \
        "clip" in inspect.signature(type(who).__init__).parameters else "Instead,"
    if np.isfinite(out.flat[bad]):   # float32 held it; the image's dtype cannot
        raise ValueError(f"{name}: the result {float(out.flat[bad])!r} at index {at} does not fit {dtype.name} "
                         f"(largest {float(np.finfo(dtype).max)!r}): it would become {became}. "
                         f"{clip} give a float32 image.")
    there = f"the input value there is {src.flat[bad].item()!r}, " if src.shape == result.shape else "the input is "
    raise ValueError(f"{name}: the result at index {at} overflowed float32, in which it computes ({there}"
                     f"dtype {src.dtype.name}): it would become {became}. {clip} scale the image into float32's range.")


class PhotometricAugmentor(ImageAugmentor):
    """Base class of augmentors that change pixel values but not geometry.

    Subclasses implement ``_get_params(img)`` (draw the random parameters) and
    ``_impl(img, params)`` (apply them to a float32 copy of the image, scaled to
    [0, 255]). The result comes back in the input's dtype; uint8 is clipped to
    [0, 255], and float results are clipped too when ``self.clip`` is true. Other
    integer dtypes (uint16, int16, ...) are clipped to their own dtype's range,
    never wrapped; with ``clip=False`` a warning says when that changes a value.
    An unclipped float result that the input's dtype cannot hold (float16 beyond
    65504, or float32 overflowed while computing on a float64 image) is a ValueError
    naming the augmentor, never a silent inf.
    Masks and coordinates are left alone.

    Example::

        class Invert(PhotometricAugmentor):
            def _get_params(self, img):
                return self.rng.rand() < 0.5
            def _impl(self, img, do_it):
                return 255 - img if do_it else img
    """

    clip = True

    def _get_params(self, img: np.ndarray) -> Any:
        raise NotImplementedError

    def _impl(self, img: np.ndarray, params: Any) -> np.ndarray:
        raise NotImplementedError

    def _apply(self, img: np.ndarray, params: Any) -> np.ndarray:
        old_dtype = img.dtype
        if old_dtype.kind in "iu" and old_dtype.itemsize >= 4 and img.size \
                and max(abs(int(img.min())), abs(int(img.max()))) > 2 ** 24:
            self._warn_once("float32", "%s: an image of dtype %s with values beyond 2**24 is computed in float32, "
                            "which rounds them.", type(self).__name__, old_dtype)
        with np.errstate(over="ignore"):   # float64 beyond float32: caught by restore_dtype
            work = _to_float(img)
        out = self._impl(work, params)
        return restore_dtype(out, old_dtype, self.clip, self, src=img)

    def get_transform(self, img):
        if type(self)._impl is PhotometricAugmentor._impl and hasattr(self, "_augment"):
            # written for tensorpack: _get_augment_params(img) and _augment(img, param)
            get_params = getattr(self, "_get_augment_params", None)
            param = get_params(img) if get_params is not None else None
            return PhotometricTransform(_CallWithParam(self._augment, param), name=type(self).__name__)
        params = self._get_params(img)
        return PhotometricTransform(_CallWithParam(self._apply, params), name=f"{type(self).__name__}({params!r})")


def _as_augmentor_list(augmentors, who: str):
    if isinstance(augmentors, ImageAugmentor):
        augmentors = [augmentors]
    augmentors = list(augmentors)
    for i, a in enumerate(augmentors):
        if not isinstance(a, ImageAugmentor):
            raise TypeError(f"{who}: item {i} is a {type(a).__name__}, not an ImageAugmentor.")
    return augmentors


class AugmentorList(ImageAugmentor):
    """Apply several augmentors in order; the drawn transform is a :class:`TransformList`.

    Each augmentor draws its transform from the output of the previous one, so
    sizes chain correctly (e.g. ``ResizeShortestEdge`` then ``CenterCrop``).

    Example::

        augs = AugmentorList([ResizeShortestEdge(256), CenterCrop(224)])
        augs.reset_state()
        out, tfm = augs.augment_return_params(img)
        mask_out = tfm.apply_mask(mask)
    """

    def __init__(self, augmentors: Sequence[ImageAugmentor]):
        self.augmentors = _as_augmentor_list(augmentors, type(self).__name__)
        super().__init__()

    def reset_state(self) -> None:
        super().reset_state()
        for a in self.augmentors:
            a.reset_state()

    def _ordered(self):
        return self.augmentors

    def augment_return_params(self, img: np.ndarray) -> Tuple[np.ndarray, Transform]:
        check_image(img, type(self).__name__)
        tfms = []
        for a in self._ordered():
            t = a.get_transform(img)
            img = t.apply_image(img)
            tfms.append(t)
        return img, TransformList(tfms)

    def get_transform(self, img: np.ndarray) -> Transform:
        """The transforms of the list, without computing the image: the first is drawn
        from ``img``, each later one from its input when the list is first applied to an
        image (:class:`LazyTransform`), so ``get_transform(img).apply_image(img)`` does the
        work once. Apply it to an image before replaying it on coordinates or masks."""
        check_image(img, type(self).__name__)
        augs = self._ordered()
        if not augs:
            return TransformList([])
        return TransformList([augs[0].get_transform(img)] + [LazyTransform(a.get_transform) for a in augs[1:]])


Augmentor = ImageAugmentor  # tensorpack's older name for the same class
