"""Where datasets live on disk, how they are fetched when asked, and the shared errors.

The default root is ``$KERASTRAINER_DATASET`` or ``~/kerastrainer_data``; each
reader keeps its files in its own sub-directory there unless given ``dir=``.
"""
from __future__ import annotations

import os
import tarfile
from typing import Iterable, Optional, Sequence

from ...utils.fs import download, get_dataset_path

__all__ = ["get_dataset_path", "download", "extract_tar", "DatasetFilesNotFound", "single_file"]


class DatasetFilesNotFound(FileNotFoundError):
    """A dataset's files are not where the reader looked; the message says how to get them."""

    def __init__(self, dataset: str, directory: str, expected: Sequence[str], how_to_get: str):
        self.dataset, self.directory, self.expected = dataset, directory, list(expected)
        lines = "\n".join(f"  - {e}" for e in expected)
        super().__init__(f"{dataset}: files not found under '{directory}'. Expected:\n{lines}\n{how_to_get}")


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
