"""Image augmentors on OpenCV (the ``[image]`` extra).

This package imports without OpenCV; the first operation that needs it imports
``cv2``, or raises an ImportError naming ``pip install kerastrainer[image]``.

Example::

    from kerastrainer.dataflow import imgaug
    augs = imgaug.AugmentorList([imgaug.ResizeShortestEdge(256), imgaug.CenterCrop(224)])
    augs.reset_state()
    out = augs.augment(img)
"""
import importlib

__all__ = []

# imgproc, misc and meta only re-export (tensorpack's module paths), so they are not listed
for _m in ("transform", "base", "compose", "resize", "crop", "flip", "color", "lighting", "normalize",
           "noise", "blur", "convert", "geometry", "paste", "deform", "external", "jitter", "presets",
           "fused_decode"):
    _mod = importlib.import_module(f"{__name__}.{_m}")
    for _n in _mod.__all__:
        globals()[_n] = getattr(_mod, _n)
        __all__.append(_n)
del _m, _mod, _n
