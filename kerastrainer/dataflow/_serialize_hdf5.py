"""The HDF5 format of :mod:`.serialize`: :class:`HDF5Serializer` and :class:`HDF5Data` (tensorpack's API).

Owns: one HDF5 dataset per datapoint component (``data_paths`` names them; numbers,
bools, numpy arrays or str of one shape in every datapoint), the checks on them, and the
DataFlow that zips the datasets back into datapoints. ``h5py`` is imported only when used.

Leaves to others: path checks, temporary files and the progress bar to
:mod:`._serialize_files`. Import the names from :mod:`kerastrainer.dataflow.serialize`,
their documented path.
"""
from __future__ import annotations

import os
from typing import Any, Iterator, List

import numpy as np

from ..utils import logger
from ..utils.rng import get_rng
from ._serialize_files import PathLike, existing_path, new_file_path, progress_bar, remove_quietly
from .base import RNGDataFlow, check_dataflow
from .common import _try_size

__all__ = ["HDF5Serializer", "HDF5Data"]


def _import_h5py():
    try:
        import h5py
    except ImportError as e:
        raise ImportError("HDF5Serializer needs the 'h5py' package: pip install 'kerastrainer[hdf5]' "
                          "(or pip install h5py)") from e
    return h5py


def _check_data_paths(data_paths, who: str) -> List[str]:
    if isinstance(data_paths, str) or not isinstance(data_paths, (list, tuple)) or not data_paths:
        raise TypeError(f"{who}: data_paths must be a non-empty list of HDF5 dataset names, one per datapoint "
                        f"component, e.g. ['label', 'image']; got {data_paths!r}")
    paths = [str(p) for p in data_paths]
    if len(set(paths)) != len(paths):
        raise ValueError(f"{who}: data_paths has repeated names: {paths}")
    return paths


def _hdf5_column(h5py, name: str, values: list, path: str):
    """The array stored for one component; str components become UTF-8 string datasets."""
    if all(isinstance(v, str) for v in values):
        return np.array(values, dtype=h5py.string_dtype("utf-8"))
    shapes = {np.shape(v) for v in values}
    if len(shapes) > 1:
        raise ValueError(f"HDF5Serializer.save: component {name!r} has different shapes in different datapoints "
                         f"({sorted(shapes)[:3]} ...); an HDF5 dataset needs one shape. Use LMDBSerializer.")
    arr = np.asarray(values)
    if arr.dtype.hasobject or arr.dtype.kind == "U":
        raise TypeError(f"HDF5Serializer.save: component {name!r} holds {type(values[0]).__name__} values that "
                        "HDF5 cannot store; use numbers, numpy arrays or str, or LMDBSerializer.")
    return arr


class HDF5Serializer:
    """Write a DataFlow to one HDF5 file (one dataset per component), and read it back.

    tensorpack's API: ``save(df, path, data_paths)``, ``load(path, data_paths, shuffle=True)``.
    The whole DataFlow is held in memory while saving.

    Example::

        HDF5Serializer.save(ds, 'train.h5', ['label', 'image'])
        ds = HDF5Serializer.load('train.h5', ['label', 'image'], shuffle=True)
    """

    @staticmethod
    def save(df: Any, path: PathLike, data_paths: List[str]) -> None:
        """Iterate ``df`` once (after ``reset_state()``) and write component ``i`` of every
        datapoint to the dataset ``data_paths[i]`` of the new file ``path``."""
        check_dataflow(df, "HDF5Serializer.save")
        names = _check_data_paths(data_paths, "HDF5Serializer.save")
        h5py = _import_h5py()
        path = new_file_path(path, "HDF5Serializer.save")
        df.reset_state()
        columns: List[list] = [[] for _ in names]
        with progress_bar(_try_size(df), "HDF5Serializer.save") as pbar:
            for i, dp in enumerate(df):
                if not isinstance(dp, (list, tuple)) or len(dp) != len(names):
                    size = len(dp) if isinstance(dp, (list, tuple)) else type(dp).__name__
                    raise ValueError(f"HDF5Serializer.save: datapoint {i} has {size} components but data_paths "
                                     f"names {len(names)} ({names})")
                for col, v in zip(columns, dp):
                    col.append(v)
                pbar.update(1)
        tmp = f"{path}.tmp-{os.getpid()}"
        try:
            with h5py.File(tmp, "w") as hf:
                for name, col in zip(names, columns):
                    hf.create_dataset(name, data=_hdf5_column(h5py, name, col, path))
            os.replace(tmp, path)
        except BaseException:
            remove_quietly(tmp)
            raise
        logger.info("HDF5Serializer: wrote %d datapoints to %s", len(columns[0]), path)

    @staticmethod
    def load(path: PathLike, data_paths: List[str], shuffle: bool = True) -> "HDF5Data":
        """A DataFlow of ``[d[i] for d in data_paths]`` over the file, shuffled each epoch when ``shuffle``."""
        return HDF5Data(path, data_paths, shuffle=shuffle)


class HDF5Data(RNGDataFlow):
    """Zip the datasets ``data_paths`` of an HDF5 file into datapoints (tensorpack's ``HDF5Data``).

    The datasets are read into memory once per process (at the first iteration), so
    worker processes each read the file themselves.

    Example::

        ds = HDF5Data('train.h5', ['label', 'image'], shuffle=False)
    """

    def __init__(self, filename: PathLike, data_paths: List[str], shuffle: bool = True):
        self._h5py = _import_h5py()
        self.path = existing_path(filename, "HDF5Serializer.load")
        self.data_paths = _check_data_paths(data_paths, "HDF5Serializer.load")
        self.shuffle = bool(shuffle)
        self._columns = None
        self._pid = None
        with self._open() as hf:
            lens = {}
            for name in self.data_paths:
                if name not in hf or not isinstance(hf[name], self._h5py.Dataset):
                    have = []
                    hf.visit(lambda n: have.append(n) if isinstance(hf[n], self._h5py.Dataset) else None)
                    raise KeyError(f"HDF5Serializer.load: {self.path!r} has no dataset {name!r}; "
                                   f"it has {sorted(have)}")
                lens[name] = hf[name].shape[0] if hf[name].shape else 0
        if len(set(lens.values())) > 1:
            raise ValueError(f"HDF5Serializer.load: the datasets of {self.path!r} have different lengths {lens}; "
                             "they cannot be zipped into datapoints")
        self._size = next(iter(lens.values()))

    def _open(self):
        try:
            return self._h5py.File(self.path, "r")
        except OSError as e:
            raise ValueError(f"HDF5Serializer.load: cannot read {self.path!r} as an HDF5 file ({e}); "
                             "is it damaged or truncated?") from None

    def _load_columns(self) -> None:
        cols = []
        with self._open() as hf:
            for name in self.data_paths:
                ds = hf[name]
                try:
                    arr = ds.asstr()[()] if self._h5py.check_string_dtype(ds.dtype) else ds[()]
                except (OSError, ValueError) as e:
                    raise ValueError(f"HDF5Serializer.load: cannot read dataset {name!r} of {self.path!r} "
                                     f"({e}); the file is damaged") from None
                if isinstance(arr, np.ndarray):
                    arr.flags.writeable = False  # an in-place edit would change later epochs
                cols.append(arr)
        self._columns, self._pid = cols, os.getpid()

    def reset_state(self) -> None:
        super().reset_state()
        self._columns = None

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Any]:
        if self._columns is None or self._pid != os.getpid():
            self._load_columns()
        if self.rng is None:
            self.rng = get_rng(self)
        order = self.rng.permutation(self._size) if self.shuffle else range(self._size)
        cols = self._columns
        for i in order:
            yield [c[i] for c in cols]
