"""keras_experiments' ``keras_exp.multigpu.optimizers`` path: the names of :mod:`kerastrainer.keras.optimizers`."""
from ..optimizers import (AdadeltaMGPU, AdagradMGPU, AdamaxMGPU, AdamMGPU, NadamMGPU, OptimizerMultiGPUMixin,
                          RMSPropMGPU, SgdMGPU)

__all__ = ["OptimizerMultiGPUMixin", "AdagradMGPU", "AdadeltaMGPU", "AdamMGPU", "AdamaxMGPU", "NadamMGPU",
           "RMSPropMGPU", "SgdMGPU"]
