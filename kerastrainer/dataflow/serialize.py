"""Save a DataFlow to one file and load it back as a DataFlow: LMDB, numpy ``.npz``,
HDF5 and TFRecord (tensorpack 0.11's four serializers, same ``save``/``load`` calls).

- :class:`LMDBSerializer`: one LMDB file (``subdir=False``); datapoint ``i`` is
  stored under the key ``b'%08d' % i`` as :func:`kerastrainer.dataflow.wire.dumps`
  bytes, and the entry ``b'__keys__'`` holds the list of keys in order. Reads are
  random access, so shuffling is cheap; good for datasets larger than memory.
  Needs the ``lmdb`` package (``pip install kerastrainer[lmdb]``).
- :class:`NumpySerializer`: one ``.npz`` loaded whole into memory. Components that
  are numpy arrays (or numbers) of one shape and dtype in every datapoint are
  stored stacked, as plain arrays ``np.load`` can read; other components are
  stored as wire-encoded bytes. No pickle is used.
- :class:`HDF5Serializer`: one HDF5 file with one dataset per datapoint component
  (``data_paths`` names them); each component must have one shape and dtype in
  every datapoint (numbers, bools, numpy arrays, or str). Needs ``h5py``
  (``pip install kerastrainer[hdf5]``).
- :class:`TFRecordSerializer`: one TFRecord file, one record per datapoint (wire
  bytes). Sequential reads only, and no stored length (``load(path, size=...)``).
  Imports TensorFlow only when called.

Both write to a temporary file and rename it at the end, so an interrupted save
leaves no half-written file, and both refuse to overwrite an existing path.

Example::

    LMDBSerializer.save(ds, '/data/train.lmdb')
    ds = LMDBSerializer.load('/data/train.lmdb', shuffle=True)   # a DataFlow with len()

    NumpySerializer.save(ds, '/data/val.npz')
    ds = NumpySerializer.load('/data/val.npz', shuffle=False)
"""
from __future__ import annotations

import json
import os
import struct
import threading
from typing import Any, Callable, Iterator, List, Optional, Union

import numpy as np

from ..utils import logger
from ..utils.rng import get_rng
from . import wire
from .base import DataFlow, DataFlowSizeUnknown, RNGDataFlow
from .base import check_dataflow
from .common import _check_int, _try_size

__all__ = ["LMDBSerializer", "NumpySerializer", "HDF5Serializer", "TFRecordSerializer", "LMDBData", "NumpyData",
           "HDF5Data", "TFRecordData"]

PathLike = Union[str, "os.PathLike[str]"]
_KEYS_ENTRY = b"__keys__"
_NPZ_FORMAT = "kerastrainer-npz"
_NPZ_VERSION = 1
_LMDB_INITIAL_MAP_SIZE = 1 << 28  # grows by doubling as the file fills; sparse, so cheap to start big


def _import_lmdb():
    try:
        import lmdb
    except ImportError as e:
        raise ImportError("LMDBSerializer needs the 'lmdb' package: pip install 'kerastrainer[lmdb]' "
                          "(or pip install lmdb)") from e
    return lmdb


def _new_file_path(path: PathLike, who: str) -> str:
    """Check that ``path`` can be created; make its parent directory."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"{who}: {path!r} is a directory; give the path of the file to write")
    if os.path.exists(path):
        raise FileExistsError(f"{who}: {path!r} already exists; remove it first or choose another path")
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    return path


def _existing_path(path: PathLike, who: str) -> str:
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{who}: {path!r} does not exist; "
                                f"write it first with {who.split('.')[0]}.save(df, path)")
    return path


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def _progress(total: Optional[int], desc: str):
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, dynamic_ncols=True, smoothing=0.1)


# ---------------------------------------------------------------------------------------------
# LMDB

class LMDBSerializer:
    """Write a DataFlow to one LMDB file, and read it back as a DataFlow.

    Example::

        LMDBSerializer.save(DataFromList(samples, shuffle=False), 'train.lmdb')
        ds = LMDBSerializer.load('train.lmdb', shuffle=True)
        ds.reset_state()
        for dp in ds:
            ...
    """

    @staticmethod
    def save(df: Any, path: PathLike, write_frequency: int = 5000) -> None:
        """Iterate ``df`` once (after ``reset_state()``) and write every datapoint to ``path``.

        Args:
            df: the DataFlow to save; datapoints must be encodable by
                :mod:`kerastrainer.dataflow.wire` (numpy arrays, numbers, str, bytes,
                and lists/dicts of them).
            path: the LMDB file to create; it must not exist.
            write_frequency: commit a transaction every this many datapoints.
        """
        check_dataflow(df, "LMDBSerializer.save")
        write_frequency = _check_int(write_frequency, "LMDBSerializer.save write_frequency", 1)
        lmdb = _import_lmdb()
        path = _new_file_path(path, "LMDBSerializer.save")
        tmp = f"{path}.tmp-{os.getpid()}"
        _remove_quietly(tmp)
        # lock=False: the only writer is this process and readers open it read-only later
        env = lmdb.open(tmp, subdir=False, map_size=_LMDB_INITIAL_MAP_SIZE, meminit=False, lock=False, sync=False)
        try:
            df.reset_state()
            keys: List[bytes] = []
            pending = []
            with _progress(_try_size(df), "LMDBSerializer.save") as pbar:
                for idx, dp in enumerate(df):
                    key = b"%08d" % idx
                    pending.append((key, wire.dumps(dp)))
                    keys.append(key)
                    if len(pending) >= write_frequency:
                        _lmdb_commit(lmdb, env, pending)
                        pending = []
                    pbar.update(1)
            pending.append((_KEYS_ENTRY, wire.dumps(keys)))
            _lmdb_commit(lmdb, env, pending)
            env.sync(True)
        except BaseException:
            env.close()
            _remove_quietly(tmp)
            raise
        env.close()
        os.replace(tmp, path)
        logger.info("LMDBSerializer: wrote %d datapoints to %s", len(keys), path)

    @staticmethod
    def load(path: PathLike, shuffle: bool = True) -> "LMDBData":
        """A DataFlow over the LMDB file at ``path``, in a new random order each epoch when ``shuffle``."""
        return LMDBData(path, shuffle=shuffle)


def _lmdb_commit(lmdb, env, items: list) -> None:
    """Write ``items`` in one transaction, doubling the map size until they fit."""
    while True:
        try:
            with env.begin(write=True) as txn:
                for k, v in items:
                    txn.put(k, v)
            return
        except lmdb.MapFullError:  # the transaction was aborted; grow the map and redo it
            env.set_mapsize(env.info()["map_size"] * 2)


# The meta pages of an LMDB file (pages 0 and 1; 64-bit layout): page header (16 bytes),
# then magic, version, address, map size, the two MDB_db records (the first one's pad field
# holds the page size), the last page number and the transaction id.
_LMDB_MAGIC = 0xBEEFC0DE
_LMDB_META = struct.Struct("<II8xQI44x48xQQ")   # magic, version, mapsize, psize, last_pgno, txnid
_LMDB_META_OFFSET = 16


def _lmdb_data_file(path: str) -> str:
    return os.path.join(path, "data.mdb") if os.path.isdir(path) else path


def check_lmdb_file(path: PathLike, who: str = "LMDB") -> None:
    """Raise ``ValueError`` naming ``path`` if the LMDB file there is empty or shorter than its
    own meta pages say, *before* LMDB maps it: reading a page past the end of a truncated
    file kills the process with SIGBUS, with no message.

    A file whose first page is not an LMDB meta page (another format, or another
    architecture's layout) is left for LMDB itself to judge.
    """
    path = os.fspath(path)
    data = _lmdb_data_file(path)
    try:
        size = os.path.getsize(data)
        with open(data, "rb") as f:
            head = f.read(_LMDB_META_OFFSET + _LMDB_META.size)
            if size == 0:
                raise ValueError(f"{who}: {data!r} is empty (0 bytes); it is not an LMDB database. "
                                 "Write it again with LMDBSerializer.save.")
            if len(head) < _LMDB_META_OFFSET + _LMDB_META.size:
                raise ValueError(f"{who}: {data!r} is truncated ({size} bytes): too short to be an LMDB "
                                 "database. Copy or write it again.")
            magic, _, _, psize, _, _ = _LMDB_META.unpack_from(head, _LMDB_META_OFFSET)
            if magic != _LMDB_MAGIC or not 512 <= psize <= (1 << 20) or psize & (psize - 1):
                return  # not our layout: LMDB gives its own error, which _acquire wraps with the path
            metas = []
            for page in (0, 1):
                f.seek(page * psize)
                raw = f.read(_LMDB_META_OFFSET + _LMDB_META.size)
                if len(raw) == len(head):
                    m = _LMDB_META.unpack_from(raw, _LMDB_META_OFFSET)
                    if m[0] == _LMDB_MAGIC:
                        metas.append(m)
    except OSError as e:
        raise ValueError(f"{who}: cannot read {data!r}: {e.strerror or e}") from None
    if len(metas) < 2:
        raise ValueError(f"{who}: {data!r} is truncated or damaged ({size} bytes): one of its two LMDB meta "
                         "pages is missing. Copy or write it again.")
    last_pgno = max(metas, key=lambda m: m[5])[4]
    need = (last_pgno + 1) * psize
    if size < need:
        raise ValueError(f"{who}: {data!r} is truncated: it has {size} bytes but its last page ends at byte "
                         f"{need} (an interrupted copy or write?). Copy or write it again; reading it would "
                         "crash the process.")


class _SharedEnvs:
    """Read-only LMDB handles shared within a process, counted by users.

    py-lmdb refuses to open one file twice in a process, so two LMDBData on one
    file share a handle. A handle inherited through fork is closed in the child
    (it must not be used there) and opened afresh.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._envs = {}  # real path -> [env, users, pid]
        if hasattr(os, "register_at_fork"):  # a lock held by another thread at fork time would never be released
            os.register_at_fork(after_in_child=self._new_lock)

    def _new_lock(self) -> None:
        self._lock = threading.Lock()

    def acquire(self, lmdb, path: str):
        key, pid = os.path.realpath(path), os.getpid()
        with self._lock:
            entry = self._envs.get(key)
            if entry is not None and entry[2] != pid:
                del self._envs[key]
                entry[0].close()  # only this process's copy of the mapping and descriptors
                entry = None
            if entry is None:
                env = lmdb.open(path, subdir=os.path.isdir(path), readonly=True, lock=False,
                                readahead=True, max_readers=256)
                entry = self._envs[key] = [env, 0, pid]
            entry[1] += 1
            return entry[0]

    def release(self, path: str) -> None:
        key = os.path.realpath(path)
        with self._lock:
            entry = self._envs.get(key)
            if entry is None or entry[2] != os.getpid():
                return
            entry[1] -= 1
            if entry[1] <= 0:
                del self._envs[key]
                entry[0].close()


_SHARED_ENVS = _SharedEnvs()


class LMDBData(RNGDataFlow):
    """The DataFlow :meth:`LMDBSerializer.load` returns.

    The file is opened read-only in ``reset_state()`` (so each worker process has
    its own handle; DataFlows of one file in one process share it). Each
    datapoint is decoded into its own writable arrays.

    Example::

        ds = LMDBData('train.lmdb', shuffle=False)
        print(len(ds))
    """

    def __init__(self, path: PathLike, shuffle: bool = True):
        self._lmdb = _import_lmdb()
        self.path = _existing_path(path, "LMDBSerializer.load")
        self.shuffle = bool(shuffle)
        self._env = None
        self._env_pid = None
        env = self._acquire()
        try:
            self.keys = self._read_keys(env)
        finally:
            _SHARED_ENVS.release(self.path)

    def _acquire(self):
        check_lmdb_file(self.path, "LMDBSerializer.load")
        self._file_size = os.path.getsize(_lmdb_data_file(self.path))
        try:
            return _SHARED_ENVS.acquire(self._lmdb, self.path)
        except self._lmdb.Error as e:
            raise ValueError(f"LMDBSerializer.load: cannot open {self.path!r} as an LMDB database: {e}") from e

    def _damaged(self, what: str, err: BaseException) -> ValueError:
        return ValueError(f"LMDBSerializer.load: {self.path!r} is damaged: {what}: {err}. "
                          "Copy or write the file again.")

    def _read_keys(self, env) -> List[bytes]:
        try:
            with env.begin() as txn:
                raw = txn.get(_KEYS_ENTRY)
                if raw is None:
                    logger.warning("LMDB %s has no %r entry (not written by LMDBSerializer); "
                                   "using all its keys in sorted order", self.path, _KEYS_ENTRY.decode())
                    return [k for k in txn.cursor().iternext(keys=True, values=False) if k != _KEYS_ENTRY]
        except self._lmdb.Error as e:
            raise self._damaged(f"reading the {_KEYS_ENTRY!r} entry failed", e) from None
        try:
            keys = wire.loads(raw)
            return [bytes(k) for k in keys]
        except (ValueError, TypeError) as e:
            raise ValueError(f"LMDBSerializer.load: the {_KEYS_ENTRY!r} entry of {self.path!r} is not in "
                             f"kerastrainer's wire format ({e}); was the file written by another library, "
                             "or is it damaged?") from None

    def reset_state(self) -> None:
        super().reset_state()
        self._close_env()
        self._env = self._acquire()
        self._env_pid = os.getpid()

    def _close_env(self) -> None:
        if self._env is not None:
            if self._env_pid == os.getpid():  # a handle inherited through fork is the registry's business
                _SHARED_ENVS.release(self.path)
            self._env = None

    def close(self) -> None:
        self._close_env()

    def __len__(self) -> int:
        return len(self.keys)

    def __iter__(self) -> Iterator[Any]:
        if self._env is None or self._env_pid != os.getpid():
            self.reset_state()
        keys = self.keys
        order = self.rng.permutation(len(keys)) if self.shuffle else range(len(keys))
        with self._env.begin(buffers=True) as txn:
            for k in order:
                key = keys[k]
                try:
                    value = txn.get(key)
                except self._lmdb.Error as e:
                    raise self._damaged(f"reading key {key!r} failed", e) from None
                if value is None:
                    raise KeyError(f"LMDB {self.path!r} lists key {key!r} in {_KEYS_ENTRY!r} but has no "
                                   "value for it; the file is damaged, write it again")
                if len(value) > self._file_size:  # a damaged length: copying it would read past the map
                    raise self._damaged(f"the value of key {key!r}",
                                        f"claims {len(value)} bytes, more than the whole file")
                # one copy out of the memory map (the buffer dies with the transaction), writable arrays
                try:
                    dp = wire.loads(bytearray(value))
                except ValueError as e:
                    raise self._damaged(f"the value of key {key!r} cannot be decoded", e) from None
                yield dp


# ---------------------------------------------------------------------------------------------
# numpy .npz

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
        path = _new_file_path(path, "NumpySerializer.save")
        df.reset_state()
        with _progress(_try_size(df), "NumpySerializer.save") as pbar:
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
            _remove_quietly(tmp)
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
        self.path = _existing_path(path, "NumpySerializer.load")
        self.shuffle = bool(shuffle)
        try:
            with np.load(self.path, allow_pickle=False) as npz:
                arrays = {name: npz[name] for name in npz.files}
        except (ValueError, OSError) as e:
            raise ValueError(f"NumpySerializer.load: cannot read {self.path!r} as an .npz file: {e}") from e
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


# ---------------------------------------------------------------------------------------------
# HDF5

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
        path = _new_file_path(path, "HDF5Serializer.save")
        df.reset_state()
        columns: List[list] = [[] for _ in names]
        with _progress(_try_size(df), "HDF5Serializer.save") as pbar:
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
            _remove_quietly(tmp)
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
        self.path = _existing_path(filename, "HDF5Serializer.load")
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


# ---------------------------------------------------------------------------------------------
# TFRecord

def _import_tf(who: str):
    try:
        import tensorflow as tf
    except ImportError as e:
        raise ImportError(f"{who} needs TensorFlow (pip install tensorflow); the other serializers do not") from e
    return tf


class TFRecordSerializer:
    """Write a DataFlow to one TFRecord file (a record of wire bytes per datapoint), and read it back.

    TensorFlow is imported only when ``save`` is called or the loaded DataFlow is
    iterated. TFRecord is sequential and stores no length: ``load(path, size=n)``
    gives the DataFlow a ``len()`` of ``n`` (tensorpack's API). Prefer
    :class:`LMDBSerializer` for random access.

    Example::

        TFRecordSerializer.save(ds, 'train.tfrecord')
        ds = TFRecordSerializer.load('train.tfrecord', size=50000)
    """

    @staticmethod
    def save(df: Any, path: PathLike) -> None:
        """Iterate ``df`` once (after ``reset_state()``) and write every datapoint to ``path``."""
        check_dataflow(df, "TFRecordSerializer.save")
        path = _new_file_path(path, "TFRecordSerializer.save")
        tf = _import_tf("TFRecordSerializer")
        df.reset_state()
        tmp = f"{path}.tmp-{os.getpid()}"
        n = 0
        try:
            with tf.io.TFRecordWriter(tmp) as writer, _progress(_try_size(df), "TFRecordSerializer.save") as pbar:
                for dp in df:
                    writer.write(wire.dumps(dp))
                    n += 1
                    pbar.update(1)
            os.replace(tmp, path)
        except BaseException:
            _remove_quietly(tmp)
            raise
        logger.info("TFRecordSerializer: wrote %d datapoints to %s", n, path)

    @staticmethod
    def load(path: PathLike, size: Optional[int] = None):
        """A DataFlow over the records of ``path`` in file order; with ``size``, epochs of exactly
        ``size`` datapoints (``FixedSizeData``), else no ``len()``."""
        ds = TFRecordData(path)
        if size is not None:
            from .common import FixedSizeData
            return FixedSizeData(ds, size)
        return ds


class TFRecordData(DataFlow):
    """The records of a TFRecord file written by :class:`TFRecordSerializer`, in order.

    Example::

        ds = TFRecordData('train.tfrecord')
    """

    def __init__(self, path: PathLike):
        self.path = _existing_path(path, "TFRecordSerializer.load")

    def __len__(self) -> int:
        raise DataFlowSizeUnknown("a TFRecord file stores no length: use TFRecordSerializer.load(path, size=n)")

    def __iter__(self) -> Iterator[Any]:
        tf = _import_tf("TFRecordSerializer.load")
        # the plain record reader: no tf.data thread pool, so it also works in forked workers
        records = tf.compat.v1.io.tf_record_iterator(self.path)
        i = 0
        while True:
            try:
                raw = next(records)
            except StopIteration:
                return
            except tf.errors.OpError as e:
                raise ValueError(f"TFRecordSerializer.load: {self.path!r} is damaged after record {i}: "
                                 f"{e.message}. Write it again.") from None
            try:
                dp = wire.loads(bytearray(raw))
            except ValueError as e:
                raise ValueError(f"TFRecordSerializer.load: record {i} of {self.path!r} is not a datapoint "
                                 f"written by TFRecordSerializer.save ({e})") from None
            i += 1
            yield dp
