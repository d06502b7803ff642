"""Mirrors ``tensorpack.tfutils.gradproc``: gradient processors."""
from ..compat.gradproc import (CheckGradient, FilterNoneGrad, GlobalNormClip, GradientProcessor, MapGradient,
                               PrintGradient, ScaleGradient, SummaryGradient)

__all__ = ["GradientProcessor", "FilterNoneGrad", "GlobalNormClip", "MapGradient", "SummaryGradient",
           "PrintGradient", "CheckGradient", "ScaleGradient"]
