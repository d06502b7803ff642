"""The old path of the gradient processors -> tfutils/gradproc.py, tfutils/optimizer.py."""
from ..tfutils.gradproc import (CheckGradient, FilterNoneGrad, GlobalNormClip, GradientProcessor,  # noqa: F401
                                MapGradient, PrintGradient, ScaleGradient, SummaryGradient, var_name)
from ..tfutils.optimizer import (AccumGradOptimizer, GradientProcessedOptimizer, apply_grad_processors,  # noqa: F401
                                 install_processors)

__all__ = ["GradientProcessor", "FilterNoneGrad", "GlobalNormClip", "MapGradient", "ScaleGradient",
           "SummaryGradient", "CheckGradient", "PrintGradient", "apply_grad_processors",
           "GradientProcessedOptimizer", "AccumGradOptimizer"]
