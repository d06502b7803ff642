"""tensorpack's ``dataflow.imgaug.misc`` path: flip, resizes and transpose."""
from .flip import Flip
from .geometry import Transpose
from .resize import RandomResize, Resize, ResizeShortestEdge

__all__ = ["Flip", "Resize", "RandomResize", "ResizeShortestEdge", "Transpose"]
