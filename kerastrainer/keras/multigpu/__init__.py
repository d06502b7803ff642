"""keras_experiments' ``keras_exp.multigpu`` path: the names of :mod:`kerastrainer.keras.parallel`."""
from ..parallel import (GPUListType, ModelKerasMGPU, ModelMGPU, get_available_gpus, make_parallel,
                        multi_gpu_model, print_mgpu_modelsummary)

__all__ = ["GPUListType", "get_available_gpus", "make_parallel", "print_mgpu_modelsummary", "ModelKerasMGPU",
           "ModelMGPU", "multi_gpu_model"]
