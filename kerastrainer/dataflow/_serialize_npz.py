"""The numpy ``.npz`` format of :mod:`.serialize`: :class:`NumpySerializer` and :class:`NumpyData`.

Owns: how datapoints are laid out in one ``.npz`` (components of one shape and dtype
stacked as plain arrays ``np.load`` can read, other components as wire-encoded bytes,
a JSON ``__meta__`` entry; no pickle) and the in-memory DataFlow that reads it back.

Leaves to others: path checks, temporary files and the progress bar to
:mod:`._serialize_files`; encoding of the other components to :mod:`.wire`. Import the
names from :mod:`kerastrainer.dataflow.serialize`, their documented path.
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable, Iterator

import numpy as np

from ..utils import logger
from ..utils.npzfile import read_npz
from ..utils.rng import get_rng
from . import wire
from ._serialize_files import PathLike, existing_path, new_file_path, progress_bar, remove_quietly
from .base import RNGDataFlow, check_dataflow
from .common import _try_size

__all__ = ["NumpySerializer", "NumpyData"]

_NPZ_FORMAT = "kerastrainer-npz"
_NPZ_VERSION = 1


def _component_mode(values: list) -> str:
    """How one component is stored: 'array' (stacked ndarrays), 'scalar' (numpy scalars),
    'py' (Python numbers of one type), or 'wire' (anything else, encoded per datapoint)."""
    first = values[0]
    if isinstance(first, np.ndarray) and first.dtype.kind != "O":
        if all(isinstance(v, np.ndarray) and v.shape == first.shape and v.dtype == first.dtype for v in values):
            return "array"
    elif isinstance(first, np.generic) and first.dtype.kind != "O":
        if all(isinstance(v, np.generic) and v.dtype == first.dtype for v in values):
            return "scalar"
    elif type(first) in (bool, float) or (type(first) is int):
        t = type(first)
        if all(type(v) is t for v in values):
            if t is not int or all(-(1 << 63) <= v < (1 << 63) for v in values):
                return "py"
    return "wire"


class NumpySerializer:
    """Write a DataFlow to one ``.npz`` file, and read it back as an in-memory DataFlow.

    Meant for data that fits in memory. Stacked components can be read directly:
    ``np.load(path)['c0']`` is component 0 of every datapoint.

    Example::

        NumpySerializer.save(DataFromList(samples, shuffle=False), 'val.npz')
        ds = NumpySerializer.load('val.npz', shuffle=False)
    """

    @staticmethod
    def save(df: Any, path: PathLike) -> None:
        """Iterate ``df`` once (after ``reset_state()``) and write all its datapoints to ``path``.

        Datapoints must all be lists of one length, or all dicts with the same str keys.
        """
        check_dataflow(df, "NumpySerializer.save")
        path = new_file_path(path, "NumpySerializer.save")
        df.reset_state()
        with progress_bar(_try_size(df), "NumpySerializer.save") as pbar:
            dps = []
            for dp in df:
                dps.append(dp)
                pbar.update(1)
        arrays, meta = _npz_arrays(dps)
        arrays["__meta__"] = np.array(json.dumps(meta))
        tmp = f"{path}.tmp-{os.getpid()}"
        try:
            with open(tmp, "wb") as f:  # a file object, so that numpy does not append '.npz' to the name
                np.savez(f, **arrays)
            os.replace(tmp, path)
        except BaseException:
            remove_quietly(tmp)
            raise
        logger.info("NumpySerializer: wrote %d datapoints to %s", len(dps), path)

    @staticmethod
    def load(path: PathLike, shuffle: bool = True) -> "NumpyData":
        """A DataFlow over the ``.npz`` at ``path``, in a new random order each epoch when ``shuffle``."""
        return NumpyData(path, shuffle=shuffle)


def _npz_arrays(dps: list):
    meta = {"format": _NPZ_FORMAT, "version": _NPZ_VERSION, "size": len(dps), "kind": "list", "keys": [],
            "modes": []}
    if not dps:
        return {}, meta
    first = dps[0]
    if isinstance(first, dict):
        meta["kind"] = "dict"
        keys = list(first)
        for k in keys:
            if not isinstance(k, str):
                raise TypeError(f"NumpySerializer.save needs str keys in dict datapoints, got {k!r}")
        for i, dp in enumerate(dps):
            if not isinstance(dp, dict) or dp.keys() != first.keys():
                raise ValueError(f"NumpySerializer.save: datapoint {i} does not have the keys of datapoint 0 "
                                 f"({sorted(keys)}); all datapoints must have the same keys")
    elif isinstance(first, (list, tuple)):
        keys = list(range(len(first)))
        for i, dp in enumerate(dps):
            if not isinstance(dp, (list, tuple)) or len(dp) != len(first):
                raise ValueError(f"NumpySerializer.save: datapoint {i} is not a list of {len(first)} components "
                                 "like datapoint 0; all datapoints must have the same length")
    else:
        raise TypeError(f"NumpySerializer.save needs list or dict datapoints, got {type(first).__name__}")
    meta["keys"] = keys
    arrays = {}
    for j, k in enumerate(keys):
        values = [dp[k] for dp in dps]
        mode = _component_mode(values)
        meta["modes"].append(mode)
        if mode == "array":
            arrays[f"c{j}"] = np.stack(values)
        elif mode in ("scalar", "py"):
            arrays[f"c{j}"] = np.asarray(values)
        else:
            try:
                blobs = [wire.dumps(v) for v in values]
            except (TypeError, ValueError) as e:
                raise TypeError(f"NumpySerializer.save cannot store component {k!r}: {e}") from e
            arrays[f"c{j}_offsets"] = np.cumsum([0] + [len(b) for b in blobs], dtype=np.int64)
            arrays[f"c{j}_data"] = np.frombuffer(b"".join(blobs), dtype=np.uint8)
    return arrays, meta


class NumpyData(RNGDataFlow):
    """The DataFlow :meth:`NumpySerializer.load` returns; the whole file is held in memory.

    Arrays in the datapoints are read-only views into the loaded data (copy one
    before editing it in place); Python numbers come back as Python numbers.

    Example::

        ds = NumpyData('val.npz', shuffle=False)
    """

    def __init__(self, path: PathLike, shuffle: bool = True):
        self.path = existing_path(path, "NumpySerializer.load")
        self.shuffle = bool(shuffle)
        arrays = read_npz(self.path, "NumpySerializer.load")   # CRCs checked; errors name the file
        meta = arrays.pop("__meta__", None)
        try:
            meta = json.loads(str(meta)) if meta is not None else None
        except ValueError:
            meta = None
        if not isinstance(meta, dict) or meta.get("format") != _NPZ_FORMAT:
            raise ValueError(f"NumpySerializer.load: {self.path!r} was not written by NumpySerializer.save "
                             "(no kerastrainer metadata)")
        if meta.get("version") != _NPZ_VERSION:
            raise ValueError(f"NumpySerializer.load: {self.path!r} has format version {meta.get('version')}, "
                             f"this kerastrainer reads version {_NPZ_VERSION}")
        for a in arrays.values():
            a.flags.writeable = False  # an in-place edit would change the data of later epochs
        self._size = int(meta["size"])
        self._is_dict = meta["kind"] == "dict"
        self._keys = meta["keys"]
        self._getters = [self._getter(arrays, j, mode) for j, mode in enumerate(meta["modes"])]

    @staticmethod
    def _getter(arrays: dict, j: int, mode: str) -> Callable[[int], Any]:
        if mode == "array":
            arr = arrays[f"c{j}"]
            return lambda i: arr[i, ...]
        if mode == "scalar":
            arr = arrays[f"c{j}"]
            return lambda i: arr[i]
        if mode == "py":
            arr = arrays[f"c{j}"]
            return lambda i: arr[i].item()
        if mode == "wire":
            data, offsets = arrays[f"c{j}_data"], arrays[f"c{j}_offsets"]
            return lambda i: wire.loads(data[offsets[i]:offsets[i + 1]])
        raise ValueError(f"NumpySerializer.load: unknown storage mode {mode!r} of component {j}")

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Any]:
        if self.rng is None:
            self.rng = get_rng(self)
        order = self.rng.permutation(self._size) if self.shuffle else range(self._size)
        getters, keys = self._getters, self._keys
        if self._is_dict:
            for i in order:
                yield {k: g(i) for k, g in zip(keys, getters)}
        else:
            for i in order:
                yield [g(i) for g in getters]
