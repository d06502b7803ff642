"""tensorpack's ``dataflow.imgaug.transform`` path: the transforms (defined in ``_transforms.py``)
and ``TransformAugmentorBase``, tensorpack's legacy name of ``ImageAugmentor``."""
from ._transforms import (CropTransform, FlipTransform, FunctionTransform, LazyTransform, NoOpTransform,
                          PhotometricTransform, ResizeTransform, Transform, TransformFactory, TransformList,
                          TransposeTransform, WarpAffineTransform)
from .base import ImageAugmentor

TransformAugmentorBase = ImageAugmentor

__all__ = ["Transform", "NoOpTransform", "TransformList", "ResizeTransform", "CropTransform",
           "FlipTransform", "PhotometricTransform", "FunctionTransform", "TransformFactory",
           "WarpAffineTransform", "TransposeTransform", "LazyTransform"]
