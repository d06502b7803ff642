"""ImageNet (ILSVRC12) from its standard directory layout.

Layout under ``dir``::

    train/<wnid>/*.JPEG
    val/*.JPEG             (dir_structure='original'; labels from val.txt in the meta dir)
    val/<wnid>/*.JPEG      (dir_structure='train')
    test/*.JPEG

Meta files (``synsets.txt``, ``synset_words.txt``, ``train.txt``, ``val.txt``,
``test.txt``) are those of Caffe's ``caffe_ilsvrc12.tar.gz``. Without a list file
the image list of a split is made by listing its directory (class folders must
be wnids of ``synsets.txt``; a flat ``val/`` needs ``val.txt`` for its labels).
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..base import RNGDataFlow
from . import files as _files
from .files import DatasetFilesNotFound, get_dataset_path

__all__ = ["ILSVRCMeta", "ILSVRC12Files", "ILSVRC12", "TinyImageNet"]

_IMAGE_EXTS = (".jpeg", ".jpg", ".png", ".bmp")
_SPLITS = ("train", "val", "test")
_STRUCTURES = ("original", "train")


def _list_images(d: str) -> List[str]:
    return sorted(f for f in os.listdir(d)
                  if f.lower().endswith(_IMAGE_EXTS) and os.path.isfile(os.path.join(d, f)))


def _subdirs(d: str) -> List[str]:
    return sorted(f for f in os.listdir(d) if os.path.isdir(os.path.join(d, f)))


def _varint(buf: bytes, pos: int) -> Tuple[int, int]:
    value, shift = 0, 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def _blobproto_data(buf: bytes) -> np.ndarray:
    """Field 5 (``repeated float data``) of a serialized Caffe ``BlobProto`` (protobuf wire format),
    packed or not; the other fields are skipped."""
    pos, parts = 0, []
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, pos = _varint(buf, pos)
        elif wire == 1:
            pos += 8
        elif wire == 2:
            n, pos = _varint(buf, pos)
            if field == 5:
                parts.append(np.frombuffer(buf[pos:pos + n], "<f4"))
            pos += n
        elif wire == 5:
            if field == 5:
                parts.append(np.frombuffer(buf[pos:pos + 4], "<f4"))
            pos += 4
        else:
            raise ValueError(f"Not a Caffe BlobProto: protobuf wire type {wire} at byte {pos}.")
    return np.concatenate(parts) if parts else np.zeros(0, np.float32)


class ILSVRCMeta:
    """The ILSVRC12 meta data: class ids, names and per-split image lists.

    Example::

        meta = ILSVRCMeta('~/data/ilsvrc_metadata')
        words = meta.get_synset_words_1000()     # {0: 'n01440764 tench, Tinca tinca', ...}
        wnids = meta.get_synset_1000()           # {0: 'n01440764', ...}
        files = meta.get_image_list('val')       # [('ILSVRC2012_val_00000001.JPEG', 65), ...]
    """

    URL = "http://dl.caffe.berkeleyvision.org/caffe_ilsvrc12.tar.gz"

    def __init__(self, dir: Optional[str] = None, download: bool = False):  # noqa: A002
        self.dir = os.path.expanduser(dir) if dir is not None else get_dataset_path("ilsvrc_metadata")
        if download and not os.path.isfile(os.path.join(self.dir, "synsets.txt")):
            archive = _files.download(self.URL, self.dir)
            _files.extract_tar(archive, self.dir)
        self._synsets: Optional[List[str]] = None

    def _missing(self, names: List[str]) -> DatasetFilesNotFound:
        return DatasetFilesNotFound(
            "ILSVRCMeta", self.dir, names,
            f"Pass download=True to fetch and extract {self.URL}, or put those files there "
            "(or pass meta_dir=<the folder that holds them>).")

    def _read_lines(self, name: str) -> List[str]:
        path = os.path.join(self.dir, name)
        if not os.path.isfile(path):
            raise self._missing([name])
        with open(path, encoding="utf-8") as f:
            return [line.strip() for line in f if line.strip()]

    def get_per_pixel_mean(self, size: Optional[Tuple[int, int]] = None) -> np.ndarray:
        """The per-pixel mean image, (256, 256, 3) BGR float32 in [0, 255] (or resized to ``size``,
        (h, w)), from ``imagenet_mean.binaryproto`` of the metadata archive (Caffe's ``BlobProto``,
        read here without Caffe), as tensorpack's."""
        path = os.path.join(self.dir, "imagenet_mean.binaryproto")
        if not os.path.isfile(path):
            raise self._missing(["imagenet_mean.binaryproto"])
        with open(path, "rb") as f:
            data = _blobproto_data(f.read())
        if data.size != 3 * 256 * 256:
            raise ValueError(f"ILSVRCMeta: {path} holds {data.size} values; a 3x256x256 mean image has "
                             f"{3 * 256 * 256}.")
        arr = np.transpose(data.reshape((3, 256, 256)).astype("float32"), [1, 2, 0])
        if size is not None:
            import cv2
            arr = cv2.resize(arr, tuple(size)[::-1])
        return arr

    def get_synset_words_1000(self) -> Dict[int, str]:
        """``{class index: 'wnid words'}`` from ``synset_words.txt``."""
        return dict(enumerate(self._read_lines("synset_words.txt")))

    def get_synset_1000(self) -> Dict[int, str]:
        """``{class index: wnid}`` from ``synsets.txt`` (or the first word of ``synset_words.txt``)."""
        return dict(enumerate(self._wnids()))

    def _wnids(self) -> List[str]:
        if self._synsets is None:
            if os.path.isfile(os.path.join(self.dir, "synsets.txt")):
                self._synsets = [line.split()[0] for line in self._read_lines("synsets.txt")]
            elif os.path.isfile(os.path.join(self.dir, "synset_words.txt")):
                self._synsets = [line.split()[0] for line in self._read_lines("synset_words.txt")]
            else:
                raise self._missing(["synsets.txt (or synset_words.txt)"])
            if len(set(self._synsets)) != len(self._synsets):
                raise ValueError(f"'{self.dir}': the synset list repeats some wnids.")
        return self._synsets

    def wnid_to_label(self) -> Dict[str, int]:
        """``{wnid: class index}``."""
        return {w: i for i, w in enumerate(self._wnids())}

    def get_image_list(self, name: str, dir_structure: str = "original",
                       image_dir: Optional[str] = None) -> List[Tuple[str, int]]:
        """``[(relative file name, label), ...]`` of a split.

        Read from ``<meta dir>/<name>.txt`` when it exists; otherwise built by listing
        ``image_dir`` (the split's folder, e.g. ``<dir>/train``). With
        ``dir_structure='train'``, val file names are ``<wnid>/<file>``.
        """
        if name not in _SPLITS:
            raise ValueError(f"ILSVRCMeta: name must be one of {_SPLITS}, got {name!r}.")
        if dir_structure not in _STRUCTURES:
            raise ValueError(f"ILSVRCMeta: dir_structure must be one of {_STRUCTURES}, got {dir_structure!r}.")
        list_path = os.path.join(self.dir, name + ".txt")
        if os.path.isfile(list_path):
            return self._read_image_list(list_path, name, dir_structure)
        if image_dir is None:
            raise self._missing([name + ".txt"])
        return self._list_image_dir(image_dir, name, dir_structure)

    def _read_image_list(self, path: str, name: str, dir_structure: str) -> List[Tuple[str, int]]:
        wnids = self._wnids() if (name == "val" and dir_structure == "train") else None
        ret = []
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                parts = line.split()
                if not parts:
                    continue
                try:
                    fname, label = parts[0], int(parts[1])
                except (IndexError, ValueError):
                    raise ValueError(f"{path}:{lineno}: expected '<file> <integer label>', got {line.strip()!r}.") \
                        from None
                if wnids is not None:
                    if not 0 <= label < len(wnids):
                        raise ValueError(f"{path}:{lineno}: label {label} is outside the "
                                         f"{len(wnids)} classes of synsets.txt.")
                    fname = os.path.join(wnids[label], fname)
                ret.append((fname, label))
        return ret

    def _list_image_dir(self, image_dir: str, name: str, dir_structure: str) -> List[Tuple[str, int]]:
        if name == "test":
            return [(f, -1) for f in _list_images(image_dir)]
        if name == "val" and dir_structure == "original":
            raise self._missing(["val.txt (labels of the flat val/ folder; or lay val/ out as "
                                 "val/<wnid>/ and pass dir_structure='train')"])
        labels = self.wnid_to_label()
        ret = []
        for wnid in _subdirs(image_dir):
            if wnid not in labels:
                raise ValueError(f"'{os.path.join(image_dir, wnid)}' is a class folder whose name is not a "
                                 f"wnid of the synset list in '{self.dir}'. Remove or rename it, or use the "
                                 "matching synsets.txt.")
            ret.extend((os.path.join(wnid, f), labels[wnid]) for f in _list_images(os.path.join(image_dir, wnid)))
        return ret


def _guess_dir_structure(split_dir: str, name: str) -> str:
    if name == "train":
        return "train"
    if name == "val" and _subdirs(split_dir):
        return "train"
    return "original"


def _check_list_matches_files(files: List[Tuple[str, int]], split_dir: str, list_source: str,
                              wnid_labels: Optional[Dict[str, int]]) -> None:
    """Every listed file must exist; in class folders, labels must match the folder's wnid."""
    listing: Dict[str, set] = {}
    missing, wrong_label = [], []
    for fname, label in files:
        sub, base = os.path.split(fname)
        if sub not in listing:
            d = os.path.join(split_dir, sub)
            listing[sub] = set(os.listdir(d)) if os.path.isdir(d) else set()
        if base not in listing[sub]:
            missing.append(fname)
        elif wnid_labels is not None and sub and wnid_labels.get(sub) != label:
            wrong_label.append((fname, label, wnid_labels.get(sub)))
    if missing:
        raise ValueError(f"{list_source} does not match the files in '{split_dir}': {len(missing)} of its "
                         f"{len(files)} entries are missing (e.g. {missing[:3]}). Check dir, name and "
                         "dir_structure, or use the list file of this copy of the dataset.")
    if wrong_label:
        f, got, want = wrong_label[0]
        raise ValueError(f"{list_source} does not match the class folders in '{split_dir}': "
                         f"{len(wrong_label)} entries have a label that differs from their folder's "
                         f"class (e.g. '{f}' has label {got}, its folder is class {want}).")


class ILSVRC12Files(RNGDataFlow):
    """Yields ``[absolute file name, label]`` of an ILSVRC12 split (label -1 for test).

    Example::

        ds = ILSVRC12Files('~/data/imagenet', 'val', meta_dir='~/data/ilsvrc_metadata')
    """

    def __init__(self, dir: str, name: str, meta_dir: Optional[str] = None,  # noqa: A002
                 shuffle: Optional[bool] = None, dir_structure: Optional[str] = None):
        """
        Args:
            dir: the dataset root holding ``train/``, ``val/``, ``test/``.
            name: 'train', 'val' or 'test'.
            meta_dir: the folder of the meta files; default: ``ILSVRCMeta``'s default.
            shuffle: shuffle at each iteration; default True for 'train' only.
            dir_structure: 'original' (flat val/) or 'train' (val/<wnid>/); default:
                guessed from whether val/ has sub-folders.
        """
        if name not in _SPLITS:
            raise ValueError(f"{type(self).__name__}: name must be one of {_SPLITS}, got {name!r}.")
        self.root = os.path.expanduser(os.fspath(dir))
        self.full_dir = os.path.join(self.root, name)
        if not os.path.isdir(self.full_dir):
            raise FileNotFoundError(f"{type(self).__name__}: no '{name}' folder at '{self.full_dir}'. "
                                    f"dir must be the ImageNet root that holds {', '.join(_SPLITS)}/.")
        if dir_structure is None:
            dir_structure = _guess_dir_structure(self.full_dir, name)
        if dir_structure not in _STRUCTURES:
            raise ValueError(f"{type(self).__name__}: dir_structure must be one of {_STRUCTURES}, "
                             f"got {dir_structure!r}.")
        self.name, self.dir_structure = name, dir_structure
        self.shuffle = (name == "train") if shuffle is None else bool(shuffle)
        self.meta = ILSVRCMeta(meta_dir)
        list_path = os.path.join(self.meta.dir, name + ".txt")
        from_list = os.path.isfile(list_path)
        self.imglist = self.meta.get_image_list(name, dir_structure, image_dir=self.full_dir)
        if not self.imglist:
            raise ValueError(f"{type(self).__name__}: no images found for '{name}' in '{self.full_dir}'.")
        if from_list:
            in_class_folders = name == "train" or dir_structure == "train"
            _check_list_matches_files(self.imglist, self.full_dir, f"The list file '{list_path}'",
                                      self.meta.wnid_to_label() if in_class_folders else None)

    def __len__(self) -> int:
        return len(self.imglist)

    def _order(self):
        idxs = np.arange(len(self.imglist))
        if self.shuffle:
            self.rng.shuffle(idxs)
        return idxs

    def __iter__(self):
        for k in self._order():
            fname, label = self.imglist[k]
            yield [os.path.join(self.full_dir, fname), label]


class ILSVRC12(ILSVRC12Files):
    """Yields ``[image, label]``: the image decoded by OpenCV as BGR uint8 HxWx3.

    Decoding is slow; run it in worker processes (e.g. ``ILSVRC12Files`` plus a
    parallel map that decodes and augments) for training at speed. An unreadable
    file raises an error naming it, or is skipped and counted in ``num_skipped``
    with ``skip_bad=True``.

    Example::

        ds = ILSVRC12('~/data/imagenet', 'train', meta_dir='~/data/ilsvrc_metadata')
        ds = AugmentImageComponent(ds, fbresnet_augmentor(is_training=True))
    """

    def __init__(self, dir: str, name: str, meta_dir: Optional[str] = None,  # noqa: A002
                 shuffle: Optional[bool] = None, dir_structure: Optional[str] = None, skip_bad: bool = False):
        super().__init__(dir, name, meta_dir, shuffle, dir_structure)
        from ..image import _BadImageCounter  # the image module imports cv2 lazily too
        self.skip_bad = bool(skip_bad)
        self._counter = _BadImageCounter(type(self).__name__)

    @property
    def num_skipped(self) -> int:
        """How many images were skipped as unreadable (with ``skip_bad=True``)."""
        return self._counter.num_skipped

    def __iter__(self):
        from ..image import BadImageError, read_image
        for k in self._order():
            fname, label = self.imglist[k]
            path = os.path.join(self.full_dir, fname)
            try:
                img = read_image(path, channel=3, rgb=False)
            except BadImageError as e:
                if not self.skip_bad:
                    raise
                self._counter.skip(e)
                continue
            yield [img, label]


class TinyImageNet(RNGDataFlow):
    """Tiny ImageNet (200 classes, 64x64): ``[image, label]`` with a BGR uint8 image. Layout under
    ``dir``: ``wnids.txt``, ``train/<wnid>/images/*.JPEG``, ``val/images/*.JPEG`` with
    ``val/val_annotations.txt``. Labels are the positions of the wnids in sorted ``wnids.txt``.

    Example::

        ds = TinyImageNet('~/data/tiny-imagenet-200', 'train')
    """

    def __init__(self, dir: str, name: str, shuffle: Optional[bool] = None):
        if name not in ("train", "val"):
            raise ValueError(f"TinyImageNet: name must be 'train' or 'val', got {name!r}")
        dir = os.path.expanduser(dir)
        wnids_file = os.path.join(dir, "wnids.txt")
        if not os.path.isfile(wnids_file):
            raise DatasetFilesNotFound("TinyImageNet", dir, ["wnids.txt", "train/<wnid>/images/*.JPEG",
                                                              "val/val_annotations.txt"],
                                       "Download tiny-imagenet-200.zip and extract it there.")
        with open(wnids_file) as f:
            wnids = sorted(w.strip() for w in f if w.strip())
        ids = {w: i for i, w in enumerate(wnids)}
        self.name = name
        self.shuffle = name == "train" if shuffle is None else shuffle
        files: List[Tuple[str, int]] = []
        if name == "train":
            for w in wnids:
                d = os.path.join(dir, "train", w, "images")
                files += [(os.path.join(d, f), ids[w]) for f in sorted(os.listdir(d))]
        else:
            with open(os.path.join(dir, "val", "val_annotations.txt")) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) >= 2:
                        files.append((os.path.join(dir, "val", "images", parts[0]), ids[parts[1]]))
        self.imglist = files

    def __len__(self) -> int:
        return len(self.imglist)

    def __iter__(self):
        import cv2
        idx = np.arange(len(self.imglist))
        if self.shuffle:
            self.rng.shuffle(idx)
        for k in idx:
            path, label = self.imglist[k]
            im = cv2.imread(path, cv2.IMREAD_COLOR)
            if im is None:
                raise ValueError(f"TinyImageNet: cannot read {path}")
            yield [im, label]
