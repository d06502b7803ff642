"""Small file helpers for callbacks that write: atomic replacement of a file.

Every atomic write of the package (``stats.json``, the checkpoint pointer, MinSaver's
record) goes through :func:`atomic_write_bytes`; the files get the umask's mode.

Example::

    atomic_write_text('train_log/stats.json', json.dumps(stats))
"""
from __future__ import annotations

import os
import tempfile

__all__ = ["atomic_write_text", "atomic_write_bytes", "fsync_dir"]


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


def _umask() -> int:
    """The process's umask, read without changing it where Linux tells it."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # (a brief set-and-restore where /proc does not say)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half of one.

    The data goes to a temporary file in the same directory, is flushed to disk, and
    replaces ``path`` with ``os.replace``. The file's mode follows the umask, like a
    file made by ``open`` (``mkstemp`` alone would make it 0600).
    """
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=d)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
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


def atomic_write_text(path: str, text: str) -> None:
    """:func:`atomic_write_bytes` of ``text`` encoded as UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"))
