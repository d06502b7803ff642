"""File-system helpers of ``tensorpack.utils.fs`` (the dataset readers of ``dataflow.dataset`` use
``get_dataset_path`` and ``download``)."""
from __future__ import annotations

import os
import shutil
import urllib.request
from typing import Iterator, Optional

from . import logger

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


def get_dataset_path(*names: str) -> str:
    """``$KERASTRAINER_DATASET/<names...>`` (default root ``~/kerastrainer_data``)."""
    root = os.environ.get("KERASTRAINER_DATASET") or os.path.join(os.path.expanduser("~"), "kerastrainer_data")
    return os.path.join(root, *names)


def download(url: str, dest_dir: str, filename: Optional[str] = None, timeout: float = 60.0) -> str:
    """Fetch ``url`` into ``dest_dir`` (atomically: a partial file never keeps the final name).

    Returns the path of the file. Does nothing when it is already there.

    Example::

        path = download('https://example.org/data.tar.gz', '/tmp/data')
    """
    filename = filename or os.path.basename(url.rstrip("/"))
    os.makedirs(dest_dir, exist_ok=True)
    path = os.path.join(dest_dir, filename)
    if os.path.isfile(path):
        return path
    tmp = path + ".part"
    logger.info("Downloading %s to %s ...", url, path)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp, open(tmp, "wb") as out:
            shutil.copyfileobj(resp, out, length=1 << 20)
    except (OSError, ValueError) as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise RuntimeError(f"Download of {url} failed ({e}). Fetch it by hand and place it at '{path}'.") from e
    size = os.path.getsize(tmp)
    if size == 0:
        os.remove(tmp)
        raise RuntimeError(f"Download of {url} produced an empty file. Fetch it by hand and place it at '{path}'.")
    os.replace(tmp, path)
    logger.info("Downloaded %s (%.1f MB).", path, size / 1e6)
    return path
