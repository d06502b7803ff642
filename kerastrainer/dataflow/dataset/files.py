"""Where datasets live on disk, how they are fetched when asked, and the shared errors.

The default root is ``$KERASTRAINER_DATASET`` or ``~/kerastrainer_data``; each
reader keeps its files in its own sub-directory there unless given ``dir=``.
"""
from __future__ import annotations

import os
import shutil
import tarfile
import urllib.request
from typing import Iterable, Optional, Sequence

from ...utils import logger

__all__ = ["get_dataset_path", "download", "extract_tar", "DatasetFilesNotFound", "single_file"]


def get_dataset_path(*names: str) -> str:
    """``$KERASTRAINER_DATASET/<names...>`` (default root ``~/kerastrainer_data``)."""
    root = os.environ.get("KERASTRAINER_DATASET") or os.path.join(os.path.expanduser("~"), "kerastrainer_data")
    return os.path.join(root, *names)


class DatasetFilesNotFound(FileNotFoundError):
    """A dataset's files are not where the reader looked; the message says how to get them."""

    def __init__(self, dataset: str, directory: str, expected: Sequence[str], how_to_get: str):
        self.dataset, self.directory, self.expected = dataset, directory, list(expected)
        lines = "\n".join(f"  - {e}" for e in expected)
        super().__init__(f"{dataset}: files not found under '{directory}'. Expected:\n{lines}\n{how_to_get}")


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


def extract_tar(path: str, dest_dir: str) -> None:
    """Extract a tar archive, refusing members that would land outside ``dest_dir``."""
    try:
        with tarfile.open(path) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest_dir, filter="data")
            else:  # pragma: no cover (Python < 3.11.4)
                root = os.path.realpath(dest_dir)
                for m in tar.getmembers():
                    target = os.path.realpath(os.path.join(dest_dir, m.name))
                    if not (target == root or target.startswith(root + os.sep)) or m.issym() or m.islnk():
                        raise ValueError(f"Refusing to extract '{m.name}' from '{path}': unsafe path.")
                tar.extractall(dest_dir)
    except (tarfile.TarError, EOFError, OSError) as e:
        raise ValueError(f"Cannot extract '{path}' ({e}); the archive may be incomplete: "
                         "delete it and download again.") from e


def first_existing(paths: Iterable[str]) -> Optional[str]:
    """The first path that is a file, or None."""
    for p in paths:
        if os.path.isfile(p):
            return p
    return None


def single_file(dataset: str, directory: str, filename: str, url: str, do_download: bool,
                dir_arg: str = "dir") -> str:
    """The path of a dataset's one file ``directory/filename``: fetched from ``url + filename``
    when missing and ``do_download``; else :class:`DatasetFilesNotFound` saying how to get it
    (``dir_arg``: the reader's name for its folder argument).

    Example::

        path = single_file('SVHNDigit', '~/data/svhn', 'train_32x32.mat', SVHNDigit.URL, False)
    """
    path = os.path.join(directory, filename)
    if os.path.isfile(path):
        return path
    if do_download:
        return download(url + filename, directory)
    raise DatasetFilesNotFound(
        dataset, directory, [filename],
        f"Pass download=True to fetch it from {url}, or copy the file there "
        f"(or pass {dir_arg}=<the folder that holds it>).")
