"""File handling shared by the serializers of :mod:`.serialize`.

Owns: the checks on the path to write (:func:`new_file_path`: never overwrite, make the
parent directory) and to read (:func:`existing_path`), removing a temporary file
(:func:`remove_quietly`), the progress bar of a ``save`` (:func:`progress_bar`), and the
per-record checksums of the LMDB and HDF5 formats (:func:`record_checksum`, :func:`sum64`,
:func:`warn_no_checksum`).

Leaves to others: every file format (LMDB in :mod:`.serialize`, ``.npz`` in
:mod:`._serialize_npz`, HDF5 in :mod:`._serialize_hdf5`, TFRecord in
:mod:`._serialize_tfrecord`). The names here are public within ``kerastrainer.dataflow``
only.
"""
from __future__ import annotations

import os
import threading
import zlib
from typing import Optional, Union

import numpy as np

PathLike = Union[str, "os.PathLike[str]"]

# The per-record checksum of our LMDB and HDF5 files: the sum, modulo 2**64, of the record's
# bytes read as little-endian 64-bit words (the last one zero-padded). It catches every
# single-bit flip, every damage confined to one 8-byte word, and random damage but for a
# 2**-64 chance; it is blind only to words swapped or to opposite flips of one bit in two
# words, which storage damage does not make. It runs at memory speed on data the reader has
# just copied (zlib.crc32 made LMDB reads of 150 KB records 2.5x slower; HDF5's own Fletcher32 3x).
CHECKSUM = "sum64"
_MASK = (1 << 64) - 1
_U64LE = np.dtype("<u8")
_add_reduce = np.add.reduce
_frombuffer = np.frombuffer
# LMDB's records are checked one by one, where numpy's fixed cost (~3 us) outweighs zlib.crc32's
# (~1 us per 3 KB, but 40 us per 150 KB): records under this size use crc32 instead
SMALL_RECORD = 8192
RECORD_CHECKSUM = "crc32<8192,sum64"


def sum64(buf) -> int:
    """The checksum of the bytes of ``buf`` (bytes, bytearray, memoryview, C-contiguous array)."""
    data = buf
    if type(buf) is not bytearray and type(buf) is not bytes:   # readers hand in these, per record: no view
        data = memoryview(buf)
        if data.ndim != 1 or data.itemsize != 1:
            data = data.cast("B")
    n = len(data) >> 3
    total = int(_add_reduce(_frombuffer(data, _U64LE, n)))   # wraps modulo 2**64; 0 for no whole word
    return (total + int.from_bytes(data[n << 3:], "little")) & _MASK


def record_checksum(buf) -> int:
    """The checksum of one record (``RECORD_CHECKSUM``): zlib's CRC-32 of a record under
    ``SMALL_RECORD`` bytes, :func:`sum64` of a larger one (whichever is faster to check)."""
    return zlib.crc32(buf) if len(buf) < SMALL_RECORD else sum64(buf)


def sum64_rows(arr: np.ndarray) -> np.ndarray:
    """:func:`sum64` of each ``arr[i]`` (a C-contiguous array of one record per row), as uint64."""
    rows = arr.reshape(len(arr), -1).view(np.uint8) if arr.size else np.zeros((len(arr), 0), np.uint8)
    width = rows.shape[1]
    if width % 8:
        padded = np.zeros((len(arr), width + 8 - width % 8), np.uint8)
        padded[:, :width] = rows
        rows = padded
    return rows.view(_U64LE).sum(axis=1, dtype=np.uint64)


_warned = set()
_warned_lock = threading.Lock()


def warn_no_checksum(path: str, who: str) -> None:
    """Say once per file and process that ``path`` carries no checksums (written before they were added)."""
    from ..utils import logger
    key = os.path.realpath(path)
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    logger.warning("%s: %s carries no checksums (written by an older kerastrainer): damage to its bytes would go "
                   "unnoticed. Write it again with %s.save to add them.", who, path, who.split(".")[0])


def new_file_path(path: PathLike, who: str) -> str:
    """Check that ``path`` can be created; make its parent directory."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"{who}: {path!r} is a directory; give the path of the file to write")
    if os.path.exists(path):
        raise FileExistsError(f"{who}: {path!r} already exists; remove it first or choose another path")
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    return path


def existing_path(path: PathLike, who: str) -> str:
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{who}: {path!r} does not exist; "
                                f"write it first with {who.split('.')[0]}.save(df, path)")
    return path


def remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def progress_bar(total: Optional[int], desc: str):
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, dynamic_ncols=True, smoothing=0.1)
