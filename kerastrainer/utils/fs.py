"""File-system helpers of ``tensorpack.utils.fs`` (``get_dataset_path`` and ``download`` are the
dataset readers' own)."""
from __future__ import annotations

import os
from typing import Iterator

from ..dataflow.dataset.files import download, get_dataset_path

__all__ = ["mkdir_p", "download", "recursive_walk", "get_dataset_path", "normpath"]


def mkdir_p(dirname: str) -> None:
    """``mkdir -p``: make ``dirname`` and its parents; nothing if it exists.

    Example::

        mkdir_p('train_log/run1/images')
    """
    if dirname:
        os.makedirs(dirname, exist_ok=True)


def recursive_walk(rootdir: str) -> Iterator[str]:
    """Every file path under ``rootdir``."""
    for r, _, files in os.walk(rootdir):
        for f in files:
            yield os.path.join(r, f)


def normpath(path: str) -> str:
    """``os.path.normpath``, leaving URLs (``gs://``, ``hdfs://``) alone."""
    return path if "://" in path else os.path.normpath(path)
