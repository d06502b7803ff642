"""TF-level pieces shared by layers, callbacks, trainers and predictors."""
from .layer_store import LayerStore, get_default_layer_store, reset_default_layer_store
from .sessinit import (ChainInit, CheckpointInit, CheckpointLoadError, DictRestore, JustCurrentSession,
                       NpzInit, SaverRestore, SessionInit, SmartInit, get_checkpoint_path)
from .summary import add_moving_summary, add_param_summary, add_tensor_summary
from .tower import TowerContext, get_current_tower_context, get_variable
from .tower import TowerFunc, TowerFuncWrapper, TowerTensorHandle, TowerTensorHandles
from .tower_func import ModelVariables, TowerFunction
from . import gradproc, optimizer, sessinit, summary, tower  # noqa: E402 (named in __all__)
from .common import get_global_step_value, get_global_step_var, get_tf_version_tuple  # noqa: E402
from .checkpoint_read import load_chkpt_vars
from .checkpoint_write import CheckpointWriteError, NonFiniteWeightsError

__all__ = ["LayerStore", "get_default_layer_store", "get_variable", "reset_default_layer_store",
           "SessionInit", "JustCurrentSession", "CheckpointInit", "SaverRestore", "DictRestore", "NpzInit",
           "ChainInit", "SmartInit", "get_checkpoint_path", "CheckpointLoadError",
           "add_moving_summary", "add_param_summary", "add_tensor_summary",
           "TowerContext", "get_current_tower_context", "TowerFunction", "ModelVariables",
           "TowerFunc", "TowerFuncWrapper", "TowerTensorHandle", "TowerTensorHandles",
           "load_chkpt_vars", "NonFiniteWeightsError", "CheckpointWriteError",
           # submodules, as tensorpack's star import gives them (`summary.add_moving_summary(...)`)
           "get_tf_version_tuple", "get_global_step_var", "get_global_step_value",
           "summary", "sessinit", "tower", "gradproc", "optimizer"]

# tensorpack's tfutils/__init__ exports these too.
from . import collection, dependency, sesscreate, varreplace  # noqa: E402 (named in __all__)
from .collect_env import collect_env_info  # noqa: E402
from .sesscreate import get_default_sess_config  # noqa: E402
from .sessinit import SaverRestoreRelaxed, get_model_loader  # noqa: E402

# The argscope names are models/'s, through the alias module tfutils/argscope.py. As in tensorpack,
# the submodule is imported here, while the package loads, and its names bound after it: a later
# `import kerastrainer.tfutils.argscope` finds it loaded and leaves `tfutils.argscope` the function
# (bound lazily, the submodule's import replaced it with the module). Last, as models/ imports
# this package while it loads.
from .argscope import argscope, enable_argscope_for_function, enable_argscope_for_module  # noqa: E402
from .argscope import get_arg_scope  # noqa: E402

__all__ += ["argscope", "get_arg_scope", "enable_argscope_for_function", "enable_argscope_for_module",
            "collect_env_info", "get_default_sess_config", "SaverRestoreRelaxed", "get_model_loader",
            "sesscreate", "varreplace"]
