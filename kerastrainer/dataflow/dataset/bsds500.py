"""The BSDS500 edge-detection dataset (Berkeley Segmentation Data Set), from its ``BSR`` directory."""
from __future__ import annotations

import glob
import os
from typing import Iterator, Optional

import numpy as np

from ..base import RNGDataFlow
from ._matfile import load_mat
from .files import DatasetFilesNotFound, get_dataset_path

__all__ = ["BSDS500"]

_H, _W = 321, 481


class BSDS500(RNGDataFlow):
    """``[image, edges]`` pairs: a (321, 481, 3) BGR uint8 image (portrait images transposed to
    landscape) and a (321, 481) float32 map, the fraction of annotators who marked each pixel as
    an edge. Reads ``<data_dir>/BSR/BSDS500/data/{images,groundTruth}/<name>/`` (needs OpenCV and
    scipy). Download ``BSR_bsds500.tgz`` from the Berkeley segmentation page and extract it
    into ``data_dir`` (not downloaded here).

    Example::

        ds = BSDS500('train', data_dir='~/data/bsds500_data')
    """

    def __init__(self, name: str, data_dir: Optional[str] = None, shuffle: bool = True):
        if name not in ("train", "test", "val"):
            raise ValueError(f"BSDS500: name must be 'train', 'test' or 'val', got {name!r}")
        data_dir = os.path.expanduser(data_dir or get_dataset_path("bsds500_data"))
        root = os.path.join(data_dir, "BSR", "BSDS500", "data")
        images = sorted(glob.glob(os.path.join(root, "images", name, "*.jpg")))
        if not images:
            raise DatasetFilesNotFound("BSDS500", data_dir, [f"BSR/BSDS500/data/images/{name}/*.jpg",
                                                             f"BSR/BSDS500/data/groundTruth/{name}/*.mat"],
                                       "Extract BSR_bsds500.tgz (Berkeley's BSDS500 archive) there.")
        import cv2
        self.shuffle = shuffle
        self.data = np.zeros((len(images), _H, _W, 3), dtype=np.uint8)
        self.label = np.zeros((len(images), _H, _W), dtype=np.float32)
        for i, f in enumerate(images):
            im = cv2.imread(f, cv2.IMREAD_COLOR)
            if im is None:
                raise ValueError(f"BSDS500: cannot read image {f}")
            if im.shape[0] > im.shape[1]:
                im = im.transpose(1, 0, 2)
            stem = os.path.splitext(os.path.basename(f))[0]
            gt = load_mat(os.path.join(root, "groundTruth", name, stem + ".mat"), ["groundTruth"], "BSDS500")
            annotations = gt["groundTruth"][0]
            edges = sum(np.asarray(a["Boundaries"][0][0], dtype=np.float32) for a in annotations)
            edges /= float(len(annotations))
            if edges.shape[0] > edges.shape[1]:
                edges = edges.T
            if im.shape[:2] != (_H, _W) or edges.shape != (_H, _W):
                raise ValueError(f"BSDS500: {f} has shape {im.shape[:2]} / edges {edges.shape}, expected {(_H, _W)}")
            self.data[i], self.label[i] = im, edges

    def __len__(self) -> int:
        return len(self.data)

    def __iter__(self) -> Iterator[list]:
        idx = np.arange(len(self.data))
        if self.shuffle:
            self.rng.shuffle(idx)
        for k in idx:
            yield [self.data[k], self.label[k]]
