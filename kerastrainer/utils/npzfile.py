"""Reading ``.npz`` files whole, with every member's CRC checked and the file named in any error.

Owns :func:`read_npz`, used by ``NumpySerializer.load`` and ``SmartInit('weights.npz')``.
``np.load`` alone checks a member's CRC only when its reader happens to reach the member's
end, and its errors (``zipfile.BadZipFile: Bad CRC-32 for file 'c0.npy'``) name no file.
Nothing is unpickled.
"""
from __future__ import annotations

import os
import struct
import zipfile
import zlib
from typing import Dict

import numpy as np

__all__ = ["read_npz", "DamagedFileError"]


class DamagedFileError(ValueError):
    """A file that cannot be read as what it claims to be; the message names it."""


# what zipfile / numpy raise on damaged bytes (MemoryError: a damaged shape asking for TiBs,
# refused by numpy before it allocates)
_DAMAGE = (zipfile.BadZipFile, zlib.error, EOFError, ValueError, OSError, KeyError, struct.error,
           NotImplementedError, RuntimeError, OverflowError, MemoryError)


def read_npz(path, who: str) -> Dict[str, np.ndarray]:
    """Every array of the ``.npz`` at ``path``, by name (``np.load``'s names).

    Raises ``FileNotFoundError`` or :class:`DamagedFileError` (a ``ValueError``) naming
    ``path``, the member and what is wrong, for a truncated, bit-flipped or non-zip file.
    """
    path = os.fspath(path)
    member = None
    try:
        with zipfile.ZipFile(path) as zf:
            out = {}
            for info in zf.infolist():
                member = info.filename
                with zf.open(info) as f:
                    arr = np.lib.format.read_array(f, allow_pickle=False)
                    # read to the member's end: zipfile checks the CRC there, and a damaged
                    # header that makes numpy read less than the member holds is caught
                    if f.read(1):
                        raise ValueError("bytes left after the array (its header is damaged)")
                out[member[:-4] if member.endswith(".npy") else member] = arr
            return out
    except FileNotFoundError:
        raise FileNotFoundError(f"{who}: {path!r} does not exist.") from None
    except _DAMAGE as e:
        where = f" (member {member!r})" if member else ""
        raise DamagedFileError(
            f"{who}: {path!r} is damaged or not an .npz file{where}: {type(e).__name__}: {e}. "
            "It was probably truncated or corrupted in a copy: copy or write it again.") from None
