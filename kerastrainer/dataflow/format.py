"""tensorpack's ``dataflow.format``: DataFlows over stored formats. ``HDF5Data`` and ``LMDBData``
live in ``serialize.py``; here: :class:`LMDBDataDecoder` (raw LMDB entries through your decoder),
:class:`SVMLightData`, and ``CaffeLMDB`` (raises: Caffe's protobuf datum is not supported)."""
from __future__ import annotations

import os
from typing import Any, Callable, Iterator, Optional, Union

import numpy as np

from ..utils.tf1_only import tf1_only_class
from .base import RNGDataFlow
from .serialize import HDF5Data, LMDBData

__all__ = ["HDF5Data", "LMDBData", "LMDBDataDecoder", "CaffeLMDB", "SVMLightData"]


class LMDBDataDecoder(RNGDataFlow):
    """Read the raw ``(key, value)`` entries of an LMDB database and produce ``decoder(key, value)``
    for each (a ``None`` result is skipped): for databases written by other tools, whose values
    are not kerastrainer's wire format.

    Args:
        lmdb_data: the database: a path, or an :class:`LMDBData` (its path and shuffle are used).
        decoder: ``(key: bytes, value: bytes) -> datapoint or None``.
        shuffle: visit the entries in a random order each pass (default: the LMDBData's, else True).

    Example::

        ds = LMDBDataDecoder('imgs.lmdb', lambda k, v: [cv2.imdecode(np.frombuffer(v, np.uint8), 1), int(k[:4])])
    """

    def __init__(self, lmdb_data: Union[str, LMDBData], decoder: Callable[[bytes, bytes], Any],
                 shuffle: Optional[bool] = None):
        if isinstance(lmdb_data, LMDBData):
            path, default_shuffle = lmdb_data.path, lmdb_data.shuffle
        else:
            path, default_shuffle = os.fspath(lmdb_data), True
        if not callable(decoder):
            raise TypeError(f"LMDBDataDecoder: decoder must be a function (key, value) -> datapoint, got {decoder!r}")
        import lmdb
        self._lmdb = lmdb
        self.path = path
        self.decoder = decoder
        self.shuffle = default_shuffle if shuffle is None else bool(shuffle)
        env = self._open()
        try:
            with env.begin() as txn:
                self.keys = [k for k in txn.cursor().iternext(keys=True, values=False) if k != b"__keys__"]
        finally:
            env.close()
        self._env = None

    def _open(self):
        return self._lmdb.open(self.path, subdir=os.path.isdir(self.path), readonly=True, lock=False,
                               readahead=True, map_size=1099511627776 * 2, max_readers=100)

    def reset_state(self) -> None:
        super().reset_state()
        self._env = self._open()

    def __len__(self) -> int:
        return len(self.keys)

    def __iter__(self) -> Iterator[Any]:
        if self._env is None:
            raise RuntimeError("LMDBDataDecoder: call reset_state() before iterating")
        idx = np.arange(len(self.keys))
        if self.shuffle:
            self.rng.shuffle(idx)
        with self._env.begin() as txn:
            for i in idx:
                k = self.keys[i]
                dp = self.decoder(k, txn.get(k))
                if dp is not None:
                    yield dp


class SVMLightData(RNGDataFlow):
    """The rows of an SVMlight / libsvm file as ``[features (float32 vector), label]`` (needs
    scikit-learn, which parses the file).

    Example::

        ds = SVMLightData('train.svm', shuffle=True)
    """

    def __init__(self, filename: str, shuffle: bool = True):
        try:
            from sklearn.datasets import load_svmlight_file
        except ImportError as e:
            raise ImportError("SVMLightData reads the file with scikit-learn: pip install scikit-learn") from e
        x, y = load_svmlight_file(filename)
        self.X = np.asarray(x.toarray(), dtype=np.float32)
        self.y = y
        self.shuffle = shuffle

    def __len__(self) -> int:
        return len(self.y)

    def __iter__(self) -> Iterator[list]:
        idx = np.arange(len(self.y))
        if self.shuffle:
            self.rng.shuffle(idx)
        for i in idx:
            yield [self.X[i], self.y[i]]


CaffeLMDB = tf1_only_class(
    "CaffeLMDB", __name__, "Caffe's LMDB datum format (a Caffe protobuf) is not supported",
    "Read the database with LMDBDataDecoder(path, decoder) and a decoder that parses the datum "
    "(e.g. with caffe.proto.caffe_pb2.Datum if Caffe is installed), or convert it once with "
    "LMDBSerializer.save.", base=RNGDataFlow)
