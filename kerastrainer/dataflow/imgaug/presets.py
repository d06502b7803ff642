"""Ready-made augmentor lists for common recipes."""
from __future__ import annotations

from typing import List, Optional

from ._cv2 import cv2
from .base import ImageAugmentor
from .color import BrightnessScale, Contrast, Saturation
from .compose import RandomOrderAug
from .convert import ToFloat32, ToUint8
from .crop import CenterCrop, GoogleNetRandomCropAndResize
from .flip import Flip
from .jitter import FusedColorJitter
from .lighting import Lighting
from .resize import ResizeShortestEdge

__all__ = ["fbresnet_augmentor"]


def fbresnet_augmentor(is_training: bool, interp: Optional[int] = None,
                       image_size: int = 224, fused_jitter: bool = True) -> List[ImageAugmentor]:
    """The ImageNet ResNet augmentation of fb.resnet.torch, for BGR uint8 images.

    Training: Inception-style random crop resized to ``image_size``, brightness,
    contrast and saturation jitter plus PCA lighting noise in a random order,
    back to uint8, and a random horizontal flip. Evaluation: resize the shorter
    side to ``image_size * 256 / 224`` (bicubic), then take the central crop.
    Outputs are uint8 ``image_size x image_size x 3``; normalise on the device.

    With ``fused_jitter`` (the default) the four colour operations are composed into
    one 3x4 matrix applied to the uint8 image (:class:`FusedColorJitter`): the same
    transform to within one grey level, about 10x cheaper than one float pass per op.

    Example::

        augs = fbresnet_augmentor(is_training=True)
        ds = AugmentImageComponent(ILSVRC12(dir, 'train'), augs)
    """
    if is_training and fused_jitter:
        return [GoogleNetRandomCropAndResize(target_shape=image_size, interp=interp), FusedColorJitter(),
                Flip(horiz=True)]
    if is_training:
        return [
            GoogleNetRandomCropAndResize(target_shape=image_size, interp=interp),
            ToFloat32(),  # one float pass for the whole jitter group instead of one per op
            RandomOrderAug([
                BrightnessScale((0.6, 1.4), clip=False),
                Contrast((0.6, 1.4), rgb=False, clip=False),
                Saturation(0.4, rgb=False, clip=False),
                Lighting(0.1, bgr=True, clip=False),
            ]),
            ToUint8(),
            Flip(horiz=True),
        ]
    resize_to = int(round(image_size * 256 / 224))
    return [ResizeShortestEdge(resize_to, interp=cv2.INTER_CUBIC if interp is None else interp),
            CenterCrop((image_size, image_size))]
