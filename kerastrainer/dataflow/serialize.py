"""Save a DataFlow to one file and load it back as a DataFlow: LMDB, numpy ``.npz``,
HDF5 and TFRecord (tensorpack 0.11's four serializers, same ``save``/``load`` calls).

- :class:`LMDBSerializer`: one LMDB file (``subdir=False``); datapoint ``i`` is
  stored under the key ``b'%08d' % i`` as :func:`kerastrainer.dataflow.wire.dumps`
  bytes, and the entry ``b'__keys__'`` holds the format, the list of keys in order and
  each record's checksum (followed by its own checksum; older files: the bare list). Reads are
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

All write to a temporary file and rename it at the end, so an interrupted save
leaves no half-written file, and all refuse to overwrite an existing path.

Integrity: every record read is checked, and damage is a ``ValueError`` naming the file
and the record. LMDB and HDF5 records carry a checksum (see
:func:`._serialize_files.record_checksum` and :func:`._serialize_files.sum64`), ``.npz``
members their zip CRC-32, TFRecord records TensorFlow's CRC. LMDB and HDF5 files written
before checksums were added are still read, with one warning per file that they carry none.

This module is the documented path of all eight names and holds the LMDB format; it
leaves ``.npz`` to :mod:`._serialize_npz`, HDF5 to :mod:`._serialize_hdf5`, TFRecord to
:mod:`._serialize_tfrecord` (which re-export here), the file handling they share to
:mod:`._serialize_files`, and the encoding of datapoints to :mod:`.wire`.

Example::

    LMDBSerializer.save(ds, '/data/train.lmdb')
    ds = LMDBSerializer.load('/data/train.lmdb', shuffle=True)   # a DataFlow with len()

    NumpySerializer.save(ds, '/data/val.npz')
    ds = NumpySerializer.load('/data/val.npz', shuffle=False)
"""
from __future__ import annotations

import os
import struct
import threading
from zlib import crc32
from typing import Any, Iterator, List

import numpy as np

from ..utils import logger
from . import wire
from ._serialize_files import (RECORD_CHECKSUM, SMALL_RECORD, PathLike, existing_path, new_file_path, progress_bar,
                               record_checksum, remove_quietly, sum64, warn_no_checksum)
from ._serialize_hdf5 import HDF5Data, HDF5Serializer
from ._serialize_npz import NumpyData, NumpySerializer
from ._serialize_tfrecord import TFRecordData, TFRecordSerializer
from .base import RNGDataFlow, check_dataflow
from .common import _check_int, _try_size

__all__ = ["LMDBSerializer", "NumpySerializer", "HDF5Serializer", "TFRecordSerializer", "LMDBData", "NumpyData",
           "HDF5Data", "TFRecordData"]

_KEYS_ENTRY = b"__keys__"
# in the keys entry, with the keys and the records' checksums: records are stored as before (older
# readers read new files), and opening a file stays one lookup (each B-tree search of a damaged
# file is one more chance of a SIGBUS). Files written before checksums hold the bare list of keys.
_FORMAT = {"format": "kerastrainer-lmdb", "version": 2, "checksum": RECORD_CHECKSUM}
_SUM_BYTES = 8


def _with_checksum(value: bytes) -> bytes:
    return value + sum64(value).to_bytes(_SUM_BYTES, "little")
_LMDB_INITIAL_MAP_SIZE = 1 << 28  # grows by doubling as the file fills; sparse, so cheap to start big


def _import_lmdb():
    try:
        import lmdb
    except ImportError as e:
        raise ImportError("LMDBSerializer needs the 'lmdb' package: pip install 'kerastrainer[lmdb]' "
                          "(or pip install lmdb)") from e
    return lmdb


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
        path = new_file_path(path, "LMDBSerializer.save")
        tmp = f"{path}.tmp-{os.getpid()}"
        remove_quietly(tmp)
        # lock=False: the only writer is this process and readers open it read-only later.
        # meminit stays on: without it, LMDB writes whatever the heap held into pages' unused bytes
        env = lmdb.open(tmp, subdir=False, map_size=_LMDB_INITIAL_MAP_SIZE, lock=False, sync=False)
        try:
            df.reset_state()
            keys: List[bytes] = []
            sums: List[int] = []
            pending = []
            with progress_bar(_try_size(df), "LMDBSerializer.save") as pbar:
                for idx, dp in enumerate(df):
                    key = b"%08d" % idx
                    value = wire.dumps(dp)
                    pending.append((key, value))
                    sums.append(record_checksum(value))
                    keys.append(key)
                    if len(pending) >= write_frequency:
                        _lmdb_commit(lmdb, env, pending)
                        pending = []
                    pbar.update(1)
            entry = dict(_FORMAT, keys=keys, sums=np.array(sums, np.uint64))
            pending.append((_KEYS_ENTRY, _with_checksum(wire.dumps(entry))))
            _lmdb_commit(lmdb, env, pending)
            env.sync(True)
        except BaseException:
            env.close()
            remove_quietly(tmp)
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
        self.path = existing_path(path, "LMDBSerializer.load")
        self.shuffle = bool(shuffle)
        self._env = None
        self._env_pid = None
        self._checksummed = False
        self._sums: List[int] = []
        self._unchecked = None
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

    def _keys_of(self, raw: bytes) -> List[bytes]:
        """The keys, from the keys entry; sets whether the records carry checksums."""
        self._checksummed = len(raw) > _SUM_BYTES and \
            sum64(memoryview(raw)[:-_SUM_BYTES]) == int.from_bytes(raw[-_SUM_BYTES:], "little")
        if self._checksummed:
            entry = self._decode_keys(memoryview(raw)[:-_SUM_BYTES])
            if not isinstance(entry, dict) or entry.get("checksum") != RECORD_CHECKSUM or "keys" not in entry \
                    or len(entry.get("sums", ())) != len(entry["keys"]):
                raise ValueError(f"LMDBSerializer.load: {self.path!r} is in format {str(entry)[:200]}; this "
                                 f"kerastrainer reads {_FORMAT}. Read it with the kerastrainer that wrote it.")
            keys, self._sums = entry["keys"], entry["sums"].tolist()
        else:
            keys = self._decode_keys(raw)   # a file written before checksums holds the bare list
            if not isinstance(keys, list):
                raise ValueError(f"LMDBSerializer.load: the {_KEYS_ENTRY!r} entry of {self.path!r} fails its "
                                 "checksum: the file is damaged (a flipped bit or a bad copy). Copy or write the "
                                 "file again.")
            warn_no_checksum(self.path, "LMDBSerializer")
        try:
            return [bytes(k) for k in keys]
        except TypeError:
            raise ValueError(f"LMDBSerializer.load: the {_KEYS_ENTRY!r} entry of {self.path!r} is not a list of "
                             "keys; the file is damaged or was written by another library.") from None

    def _get(self, txn, key: bytes):
        """A copy of the value of ``key`` (``txn`` made with ``buffers=True``), or None."""
        value = txn.get(key)
        if value is not None and len(value) > self._file_size:   # copying it would read past the map: SIGBUS
            raise self._damaged(f"the {key!r} entry", f"claims {len(value)} bytes, more than the whole file")
        return None if value is None else bytes(value)

    def _checksum_error(self, k: int, key: bytes) -> ValueError:
        return ValueError(f"LMDBSerializer.load: record {k} (key {key!r}) of {self.path!r} fails its checksum: "
                          "the file is damaged (a flipped bit or a bad copy). Copy or write the file again.")

    def _read_keys(self, env) -> List[bytes]:
        try:
            with env.begin(buffers=True) as txn:
                raw = self._get(txn, _KEYS_ENTRY)
                if raw is None:
                    logger.warning("LMDB %s has no %r entry (not written by LMDBSerializer); "
                                   "using all its keys in sorted order", self.path, _KEYS_ENTRY.decode())
                    warn_no_checksum(self.path, "LMDBSerializer")
                    return [k for k in txn.cursor().iternext(keys=True, values=False) if k != _KEYS_ENTRY]
        except self._lmdb.Error as e:
            raise self._damaged(f"reading the {_KEYS_ENTRY!r} entry failed", e) from None
        return self._keys_of(raw)

    def _decode_keys(self, buf):
        try:
            return wire.loads(buf)
        except (ValueError, TypeError) as e:
            raise ValueError(f"LMDBSerializer.load: the {_KEYS_ENTRY!r} entry of {self.path!r} is not in "
                             f"kerastrainer's wire format ({e}); was the file written by another library, "
                             "or is it damaged?") from None

    def reset_state(self) -> None:
        super().reset_state()
        self._close_env()
        self._env = self._acquire()
        self._env_pid = os.getpid()
        # a record is checked the first time this process reads it after reset_state: later epochs
        # read the same read-only pages again (checking them each epoch cost 10-25% of the read)
        self._unchecked = bytearray(b"\x01") * len(self.keys) if self._checksummed else None

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
        sums = self._sums if self._checksummed else None
        unchecked = self._unchecked
        order = self.rng.permutation(len(keys)) if self.shuffle else range(len(keys))
        file_size, loads, lmdb_error = self._file_size, wire.loads, self._lmdb.Error   # locals: the loop is hot
        with self._env.begin(buffers=True) as txn:
            get = txn.get
            for k in order:
                key = keys[k]
                try:
                    value = get(key)
                except lmdb_error as e:
                    raise self._damaged(f"reading key {key!r} failed", e) from None
                if value is None:
                    raise KeyError(f"LMDB {self.path!r} lists key {key!r} in {_KEYS_ENTRY!r} but has no "
                                   "value for it; the file is damaged, write it again")
                if len(value) > file_size:  # a damaged length: copying it would read past the map
                    raise self._damaged(f"the value of key {key!r}",
                                        f"claims {len(value)} bytes, more than the whole file")
                # one copy out of the memory map (the buffer dies with the transaction), writable arrays
                buf = bytearray(value)   # the checksum then reads this copy from the cache
                if sums is not None and unchecked[k]:
                    if (crc32(buf) if len(buf) < SMALL_RECORD else sum64(buf)) != sums[k]:
                        raise self._checksum_error(k, key)   # (record_checksum, inlined: it runs per record)
                    unchecked[k] = 0
                try:
                    dp = loads(buf)
                except ValueError as e:
                    raise self._damaged(f"the value of key {key!r} cannot be decoded", e) from None
                yield dp
