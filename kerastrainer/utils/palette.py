"""``PALETTE_RGB``: distinct colours for drawing boxes and masks (tensorpack's name).

kerastrainer's own palette: 80 colours spread around the hue circle by the golden ratio, at
alternating saturation and value, so that neighbouring indices differ clearly.
"""
import colorsys

import numpy as np

__all__ = ["PALETTE_RGB"]


def _palette(n: int = 80) -> np.ndarray:
    golden = 0.618033988749895
    out = []
    for i in range(n):
        s, v = (0.85, 0.95) if i % 2 == 0 else (0.6, 0.75)
        out.append(colorsys.hsv_to_rgb((i * golden) % 1.0, s, v))
    return np.round(np.asarray(out) * 255).astype(np.int64)


#: (80, 3) int array of RGB colours in [0, 255]; reverse the last axis for OpenCV's BGR
PALETTE_RGB: np.ndarray = _palette()
