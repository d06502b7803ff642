"""Small file helpers for callbacks that write: atomic replacement of a text file.

Example::

    atomic_write_text('train_log/stats.json', json.dumps(stats))
"""
from __future__ import annotations

import os
import tempfile

__all__ = ["atomic_write_text", "fsync_dir"]


def fsync_dir(directory: str) -> None:
    """Flush a directory's entries (renames) to disk where the OS allows it."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the new one, never half of one.

    The text goes to a temporary file in the same directory, is flushed to disk, and
    replaces ``path`` with ``os.replace``.
    """
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(d)
