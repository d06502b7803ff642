"""Small file helpers for callbacks that write: atomic replacement of a file.

Every atomic write of the package (``stats.json``, the checkpoint pointer, MinSaver's
record) goes through :func:`atomic_write_bytes`; the files get the umask's mode.

Example::

    atomic_write_text('train_log/stats.json', json.dumps(stats))
"""
from __future__ import annotations

import glob
import os
import tempfile
from typing import Optional

__all__ = ["atomic_write_text", "atomic_write_bytes", "fsync_dir", "remove_stale_temporaries"]


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
    replaces ``path`` with ``os.replace``. Where the file system allows it, the temporary
    file is nameless (``O_TMPFILE``) until it is whole, so a process killed while writing
    leaves nothing behind; otherwise it is ``.<name>.<random>.tmp`` (see
    :func:`remove_stale_temporaries`). The file's mode follows the umask, like a file made by
    ``open`` (``mkstemp`` alone would make it 0600).
    """
    d = os.path.dirname(os.path.abspath(path))
    try:
        tmp = _flushed_temporary(d, os.path.basename(path), data)
    except OSError as e:
        if e.filename is not None or e.errno is None:
            raise
        # os.write's error names no file: "[Errno 28] No space left on device: 'stats.json'"
        raise OSError(e.errno, e.strerror, path) from e
    try:
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(d)


def _flushed_temporary(d: str, name: str, data: bytes) -> str:
    """A temporary file in ``d`` that holds ``data`` on disk; returns its path."""
    mode = 0o666 & ~_umask()
    tmp = _nameless_until_whole(d, name, data, mode)
    if tmp is not None:
        return tmp
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=d)
    try:
        _write_all(fd, data, mode)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    return tmp


def _nameless_until_whole(d: str, name: str, data: bytes, mode: int) -> Optional[str]:
    """Write ``data`` to an ``O_TMPFILE`` in ``d`` and give it a name once it is on disk;
    None where the system or the file system cannot."""
    try:
        fd = os.open(d, os.O_TMPFILE | os.O_WRONLY, mode)
    except (AttributeError, OSError):
        return None
    try:
        _write_all(fd, data, mode)
        dfd = os.open(d, os.O_RDONLY)
        try:
            while True:
                tmp = f".{name}.{os.urandom(6).hex()}.tmp"
                try:   # linkat(AT_SYMLINK_FOLLOW) through /proc: the dir fd makes Python use linkat
                    os.link(f"/proc/self/fd/{fd}", tmp, dst_dir_fd=dfd, follow_symlinks=True)
                    return os.path.join(d, tmp)
                except FileExistsError:
                    continue
                except OSError:
                    return None
        finally:
            os.close(dfd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes, mode: int) -> None:
    os.fchmod(fd, mode)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.fsync(fd)


def remove_stale_temporaries(path: str) -> None:
    """Remove the temporary files a killed :func:`atomic_write_bytes` of ``path`` left behind."""
    d, name = os.path.split(os.path.abspath(path))
    for tmp in glob.glob(os.path.join(glob.escape(d), f".{glob.escape(name)}.*.tmp")):
        try:
            os.unlink(tmp)
        except OSError:
            pass


def atomic_write_text(path: str, text: str) -> None:
    """:func:`atomic_write_bytes` of ``text`` encoded as UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"))
