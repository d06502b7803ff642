"""The old path of the global step registry (tensorpack's ``get_global_step_var``); it lives in ``tfutils/global_step.py``."""
from ..tfutils.global_step import (active_store, get_global_step_value, get_global_step_var, global_step_of,
                                   set_current_global_step)

__all__ = ["get_global_step_var", "get_global_step_value", "global_step_of", "active_store",
           "set_current_global_step"]
