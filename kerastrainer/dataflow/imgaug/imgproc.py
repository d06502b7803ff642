"""tensorpack's ``dataflow.imgaug.imgproc`` path: its pixel-value augmentors."""
from .blur import GaussianBlur
from .color import Brightness, BrightnessScale, Contrast, Gamma, Hue, Saturation
from .lighting import Lighting
from .normalize import Clip, MeanVarianceNormalize, MinMaxNormalize

__all__ = ["Hue", "Brightness", "BrightnessScale", "Contrast", "MeanVarianceNormalize", "GaussianBlur", "Gamma",
           "Clip", "Saturation", "Lighting", "MinMaxNormalize"]
