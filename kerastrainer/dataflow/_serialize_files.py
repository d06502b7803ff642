"""File handling shared by the serializers of :mod:`.serialize`.

Owns: the checks on the path to write (:func:`new_file_path`: never overwrite, make the
parent directory) and to read (:func:`existing_path`), removing a temporary file
(:func:`remove_quietly`) and the progress bar of a ``save`` (:func:`progress_bar`).

Leaves to others: every file format (LMDB in :mod:`.serialize`, ``.npz`` in
:mod:`._serialize_npz`, HDF5 in :mod:`._serialize_hdf5`, TFRecord in
:mod:`._serialize_tfrecord`). The names here are public within ``kerastrainer.dataflow``
only.
"""
from __future__ import annotations

import os
from typing import Optional, Union

PathLike = Union[str, "os.PathLike[str]"]


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
