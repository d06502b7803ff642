"""OpenCV, imported on first use so that ``kerastrainer.dataflow`` imports without it.

Modules that need OpenCV write ``from ._cv2 import cv2`` and use ``cv2.resize``
as usual: the first attribute access imports the real module, or raises an
ImportError that names the ``[image]`` extra.
"""
from __future__ import annotations

__all__ = ["cv2", "require_cv2"]

_INSTALL_HINT = ("OpenCV (the cv2 module) is needed for image decoding and augmentation but could "
                 "not be imported. Install it with `pip install kerastrainer[image]` "
                 "(or `pip install opencv-python-headless`).")


def require_cv2():
    """Return the cv2 module, or raise an ImportError that says how to install it."""
    try:
        import cv2 as real_cv2
    except ImportError as e:
        raise ImportError(f"{_INSTALL_HINT} Original error: {e}") from e
    return real_cv2


class _LazyCV2:
    """Stands in for the cv2 module; imports it at the first attribute access."""

    def __getattr__(self, name: str):
        value = getattr(require_cv2(), name)
        # Cache on the instance so later look-ups skip __getattr__ entirely.
        setattr(self, name, value)
        return value

    def __repr__(self) -> str:
        return "<lazily imported cv2>"


cv2 = _LazyCV2()
