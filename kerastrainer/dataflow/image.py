"""DataFlows that read images from files and augment image components.

Decoding and augmentation are CPU work: run them in worker processes (e.g.
``MultiProcessMapData`` or ``MultiProcessRunnerZMQ`` around these DataFlows) and
keep the images uint8 until they reach the device.

Example::

    from kerastrainer.dataflow import ImageFromFile, AugmentImageComponent, imgaug
    ds = ImageFromFile(glob.glob('photos/*.jpg'), channel=3, shuffle=True, skip_bad=True)
    ds = AugmentImageComponent(ds, [imgaug.ResizeShortestEdge(256), imgaug.CenterCrop(224)])
"""
from __future__ import annotations

import copy as copy_mod
import os
from typing import Any, Iterable, Optional, Sequence, Tuple, Union

import numpy as np

from ..utils import logger
from .base import ProxyDataFlow, RNGDataFlow
from .imgaug._cv2 import cv2
from .imgaug.base import ImageAugmentor
from .imgaug.compose import AugmentorList
from ..utils.casting import whole_number

__all__ = ["ImageFromFile", "AugmentImageComponent", "AugmentImageComponents", "AugmentImageCoordinates", "read_image",
           "decode_image", "is_truncated_jpeg", "BadImageError"]


class BadImageError(ValueError):
    """An image file that is missing, unreadable or cannot be decoded."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"Cannot read image '{path}': {reason}")
        self.path = path
        self.reason = reason


_JPEG_SOI = b"\xff\xd8"
# markers without a length field: SOI, EOI, RST0-7, TEM
_JPEG_STANDALONE = {0xD8, 0xD9, 0x01} | set(range(0xD0, 0xD8))


def is_truncated_jpeg(buf: Union[bytes, bytearray, memoryview, np.ndarray]) -> bool:
    """True when ``buf`` is a JPEG whose data ends before its end-of-image marker (0xFFD9).

    Decoders (libjpeg in OpenCV, PIL) decode such a file "successfully", filling the
    missing rows with grey and at most printing a warning; this check finds it from the
    bytes. It walks the marker segments and the entropy-coded scans (so an ``FFD9`` inside
    an EXIF thumbnail does not count, and data appended after the end marker is allowed).
    Buffers that are not JPEG (no ``FFD8`` start) give False.

    Example::

        with open("photo.jpg", "rb") as f:
            if is_truncated_jpeg(f.read()):
                print("photo.jpg is cut short")
    """
    data = bytes(memoryview(buf).cast("B")) if not isinstance(buf, bytes) else buf
    n = len(data)
    if n < 2 or data[:2] != _JPEG_SOI:
        return False
    pos = 2
    in_scan = False
    while True:
        if in_scan:
            # entropy-coded data: 0xFF is followed by 0x00 (stuffing), RSTn, or a real marker
            ff = data.find(b"\xff", pos)
            if ff < 0 or ff + 1 >= n:
                return True
            code = data[ff + 1]
            if code == 0x00 or 0xD0 <= code <= 0xD7 or code == 0xFF:
                pos = ff + 1 if code == 0xFF else ff + 2
                continue
            in_scan = False
            pos = ff
        # at a marker: skip fill bytes
        while pos < n and data[pos] == 0xFF:
            pos += 1
        if pos >= n:
            return True
        code = data[pos]
        pos += 1
        if code == 0xD9:
            return False
        if code in _JPEG_STANDALONE:
            continue
        if pos + 2 > n:
            return True
        seglen = (data[pos] << 8) | data[pos + 1]
        if seglen < 2:
            return True  # not a valid segment: the data that follows is not usable either
        pos += seglen
        if pos > n:
            return True
        if code == 0xDA:   # start of scan: entropy-coded data follows the header
            in_scan = True


def decode_image(buf: Union[bytes, bytearray, memoryview, np.ndarray], channel: int = 3, rgb: bool = False,
                 name: str = "<buffer>") -> np.ndarray:
    """Decode encoded image bytes (JPEG, PNG, ...) to uint8, or raise :class:`BadImageError`.

    A truncated JPEG (see :func:`is_truncated_jpeg`) is an error, not a half-grey image.

    Args:
        buf: the file's bytes.
        channel: 3 for colour (HxWx3), 1 for greyscale (HxWx1).
        rgb: for colour images, return RGB instead of OpenCV's BGR.
        name: what to call the image in errors (its file or key).

    Example::

        img = decode_image(open("a.jpg", "rb").read(), channel=3, rgb=True, name="a.jpg")
    """
    if channel not in (1, 3):
        raise ValueError(f"channel must be 1 or 3, got {channel!r}.")
    arr = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf.reshape(-1).view(np.uint8)
    if arr.size == 0:
        raise BadImageError(name, "the file is empty.")
    if is_truncated_jpeg(arr):
        raise BadImageError(name, f"truncated JPEG ({arr.size} bytes, no end-of-image marker): the file was "
                                  "cut short (interrupted copy or download). Re-fetch it, or use skip_bad=True.")
    mode = cv2.IMREAD_COLOR if channel == 3 else cv2.IMREAD_GRAYSCALE
    img = cv2.imdecode(arr, mode)
    if img is None:
        raise BadImageError(name, "OpenCV could not decode it (corrupt, truncated or not an image).")
    if channel == 1:
        img = img[:, :, np.newaxis] if img.ndim == 2 else img
    elif rgb:
        img = np.ascontiguousarray(img[:, :, ::-1])
    return img


def read_image(path: str, channel: int = 3, rgb: bool = False) -> np.ndarray:
    """Decode an image file to a uint8 array, or raise :class:`BadImageError` naming it.

    Missing, unreadable, undecodable and truncated files (see :func:`is_truncated_jpeg`)
    all raise :class:`BadImageError`.

    Args:
        path: the file.
        channel: 3 for colour (HxWx3), 1 for greyscale (HxWx1).
        rgb: for colour images, return RGB instead of OpenCV's BGR.
    """
    if channel not in (1, 3):
        raise ValueError(f"channel must be 1 or 3, got {channel!r}.")
    if not os.path.exists(path):
        raise BadImageError(path, "no such file.")
    try:
        with open(path, "rb") as f:
            buf = f.read()
    except OSError as e:
        raise BadImageError(path, f"not a readable file ({e.strerror or e}).") from None
    return decode_image(buf, channel, rgb, name=path)


class _BadImageCounter:
    """Counts skipped images and warns for the first few, then every 1000th."""

    def __init__(self, who: str):
        self.who = who
        self.num_skipped = 0

    def skip(self, err: BaseException) -> None:
        self.num_skipped += 1
        n = self.num_skipped
        if n <= 5 or n % 1000 == 0:
            logger.warning("%s: skipped a bad datapoint (%d skipped so far): %s", self.who, n, err)


class ImageFromFile(RNGDataFlow):
    """Yield ``[image]`` for each file: uint8, RGB (``channel=3``) or HxWx1 (``channel=1``).

    Unreadable or corrupt files raise :class:`BadImageError` naming the file; with
    ``skip_bad=True`` they are skipped instead, counted in ``num_skipped`` and
    reported through the logger.

    Example::

        ds = ImageFromFile(['a.jpg', 'b.png'], channel=3, resize=(224, 224))
        ds.reset_state()
        for [img] in ds:
            ...
    """

    def __init__(self, files: Iterable[str], channel: int = 3, resize: Optional[Tuple[int, int]] = None,
                 shuffle: bool = False, skip_bad: bool = False, rgb: bool = True):
        """
        Args:
            files: image paths.
            channel: 3 (colour) or 1 (greyscale).
            resize: ``(h, w)`` to resize every image to, or None.
            shuffle: shuffle the order at each iteration.
            skip_bad: skip unreadable images (counted in ``num_skipped``) instead of raising.
            rgb: colour images in RGB order (tensorpack's behaviour); False gives OpenCV's BGR.
        """
        self.files = [os.fspath(f) for f in files]
        if not self.files:
            raise ValueError("ImageFromFile: the list of files is empty.")
        if channel not in (1, 3):
            raise ValueError(f"ImageFromFile: channel must be 1 or 3, got {channel!r}.")
        if resize is not None:
            resize = tuple(whole_number(v, "ImageFromFile(resize=...)", minimum=1) for v in resize)
            if len(resize) != 2 or min(resize) <= 0:
                raise ValueError(f"ImageFromFile: resize must be a pair (h, w) of positive ints, got {resize!r}.")
        self.channel, self.resize, self.shuffle = channel, resize, bool(shuffle)
        self.skip_bad, self.rgb = bool(skip_bad), bool(rgb)
        self._counter = _BadImageCounter("ImageFromFile")

    @property
    def num_skipped(self) -> int:
        """How many files were skipped as unreadable (with ``skip_bad=True``)."""
        return self._counter.num_skipped

    def __len__(self) -> int:
        return len(self.files)

    def __iter__(self):
        files = self.files
        if self.shuffle:
            files = list(files)
            self.rng.shuffle(files)
        for f in files:
            try:
                img = read_image(f, self.channel, self.rgb)
            except BadImageError as e:
                if not self.skip_bad:
                    raise
                self._counter.skip(e)
                continue
            if self.resize is not None:
                img = cv2.resize(img, (self.resize[1], self.resize[0]))
                if self.channel == 1:
                    img = img[:, :, np.newaxis]
            yield [img]


def _as_augmentor(augmentors: Union[ImageAugmentor, Sequence[ImageAugmentor]]) -> ImageAugmentor:
    if isinstance(augmentors, AugmentorList):
        return augmentors
    return AugmentorList(augmentors)


def _copy_value(v):
    return v.copy() if isinstance(v, np.ndarray) else copy_mod.deepcopy(v)


def _copy_datapoint(dp: Any, who: str):
    if isinstance(dp, list):
        return list(dp)
    if isinstance(dp, dict):
        return dict(dp)
    if isinstance(dp, tuple):
        return list(dp)
    raise TypeError(f"{who}: datapoints must be lists or dicts, got {type(dp).__name__}.")


def _get_component(dp, key, who: str):
    try:
        return dp[key]
    except (IndexError, KeyError):
        size = f"{len(dp)} components" if isinstance(dp, list) else f"keys {sorted(dp)}"
        raise IndexError(f"{who}: the datapoint has no component {key!r} (it has {size}).") from None


class AugmentImageComponent(ProxyDataFlow):
    """Augment one image component of each datapoint.

    Example::

        ds = AugmentImageComponent(ds, [imgaug.RandomCrop(28), imgaug.Flip(horiz=True)], index=0)
    """

    def __init__(self, ds, augmentors: Union[ImageAugmentor, Sequence[ImageAugmentor]],
                 index: Union[int, str] = 0, copy: bool = True, catch_exceptions: bool = False):
        """
        Args:
            ds: the DataFlow.
            augmentors: an augmentor or a list of them, applied in order.
            index: the component to augment (a list index, or a key for dict datapoints).
            copy: copy the image before augmenting, so augmentors that work in place
                never change the upstream DataFlow's arrays.
            catch_exceptions: skip datapoints whose augmentation raises, counting them in
                ``num_skipped`` and warning through the logger, instead of raising.
        """
        super().__init__(ds)
        self.augs = _as_augmentor(augmentors)
        self.index, self.copy, self.catch_exceptions = index, bool(copy), bool(catch_exceptions)
        self._counter = _BadImageCounter(type(self).__name__)

    @property
    def num_skipped(self) -> int:
        """Datapoints dropped because augmentation raised (with ``catch_exceptions=True``)."""
        return self._counter.num_skipped

    def reset_state(self) -> None:
        super().reset_state()
        self.augs.reset_state()

    def _augment(self, dp):
        dp = _copy_datapoint(dp, type(self).__name__)
        img = _get_component(dp, self.index, type(self).__name__)
        if self.copy:
            img = _copy_value(img)
        dp[self.index] = self.augs.augment(img)
        return dp

    def __iter__(self):
        for dp in self.ds:
            try:
                out = self._augment(dp)
            except Exception as e:  # noqa: BLE001 (only when the user asked to skip)
                if not self.catch_exceptions:
                    raise
                self._counter.skip(e)
                continue
            yield out


class AugmentImageComponents(AugmentImageComponent):
    """Apply one random draw of the augmentors to several components of each datapoint.

    The transform is drawn from the first component of ``index`` and replayed on
    the other images (``index``), on masks (``mask_index``: geometric changes with
    nearest-neighbour interpolation, no colour changes) and on ``(N, 2)`` ``(x, y)``
    coordinate arrays (``coords_index``). All images and masks must share height
    and width.

    Example::

        # [image, mask, keypoints]
        ds = AugmentImageComponents(ds, [imgaug.RandomCrop(64), imgaug.Flip(horiz=True)],
                                    index=(0,), mask_index=(1,), coords_index=(2,))
    """

    def __init__(self, ds, augmentors: Union[ImageAugmentor, Sequence[ImageAugmentor]],
                 index: Sequence[Union[int, str]] = (0, 1), coords_index: Sequence[Union[int, str]] = (),
                 copy: bool = True, catch_exceptions: bool = False,
                 mask_index: Sequence[Union[int, str]] = ()):
        index, coords_index, mask_index = tuple(index), tuple(coords_index), tuple(mask_index)
        if not index:
            raise ValueError("AugmentImageComponents: index must name at least one image component.")
        super().__init__(ds, augmentors, index[0], copy, catch_exceptions)
        self.index, self.coords_index, self.mask_index = index, coords_index, mask_index

    def _augment(self, dp):
        who = type(self).__name__
        dp = _copy_datapoint(dp, who)

        def get(key):
            v = _get_component(dp, key, who)
            return _copy_value(v) if self.copy else v

        first = get(self.index[0])
        h, w = first.shape[:2]
        for key in self.index[1:] + self.mask_index:
            other = _get_component(dp, key, who)
            if other.shape[:2] != (h, w):
                raise ValueError(f"{who}: component {key!r} has shape {other.shape} but component "
                                 f"{self.index[0]!r} is {h}x{w}; images and masks augmented together "
                                 "must have the same height and width.")
        dp[self.index[0]], tfm = self.augs.augment_return_params(first)
        for key in self.index[1:]:
            dp[key] = tfm.apply_image(get(key))
        for key in self.mask_index:
            dp[key] = tfm.apply_mask(get(key))
        for key in self.coords_index:
            coords = np.asarray(_get_component(dp, key, who), dtype=np.float32)
            if coords.ndim != 2 or coords.shape[1] != 2:
                raise ValueError(f"{who}: coordinate component {key!r} must have shape (N, 2), "
                                 f"got {coords.shape}.")
            dp[key] = tfm.apply_coords(coords.copy())
        return dp


class AugmentImageCoordinates(AugmentImageComponents):
    """Augment an image and replay the same transform on an ``(N, 2)`` array of ``(x, y)``
    coordinates in another component (tensorpack's name for the one-image case of
    :class:`AugmentImageComponents`).

    Example::

        # [image, keypoints]
        ds = AugmentImageCoordinates(ds, [imgaug.Resize((64, 64)), imgaug.Flip(horiz=True)], 0, 1)
    """

    def __init__(self, ds, augmentors: Union[ImageAugmentor, Sequence[ImageAugmentor]],
                 img_index: Union[int, str] = 0, coords_index: Union[int, str] = 1, copy: bool = True,
                 catch_exceptions: bool = False):
        super().__init__(ds, augmentors, index=(img_index,), coords_index=(coords_index,), copy=copy,
                         catch_exceptions=catch_exceptions)
