"""TF-level pieces shared by layers, callbacks, trainers and predictors."""
from .layer_store import LayerStore, get_default_layer_store, reset_default_layer_store
from .sessinit import (ChainInit, CheckpointInit, CheckpointLoadError, DictRestore, JustCurrentSession,
                       NpzInit, SaverRestore, SessionInit, SmartInit, get_checkpoint_path)
from .summary import add_moving_summary, add_param_summary, add_tensor_summary
from .tower import TowerContext, get_current_tower_context, get_variable
from .tower_func import ModelVariables, TowerFunction
from . import gradproc, optimizer, sessinit, summary, tower  # noqa: E402 (named in __all__)
from .common import get_global_step_value, get_global_step_var, get_tf_version_tuple  # noqa: E402
from .varmanip import CheckpointWriteError, NonFiniteWeightsError, load_chkpt_vars

__all__ = ["LayerStore", "get_default_layer_store", "get_variable", "reset_default_layer_store",
           "SessionInit", "JustCurrentSession", "CheckpointInit", "SaverRestore", "DictRestore", "NpzInit",
           "ChainInit", "SmartInit", "get_checkpoint_path", "CheckpointLoadError",
           "add_moving_summary", "add_param_summary", "add_tensor_summary",
           "TowerContext", "get_current_tower_context", "TowerFunction", "ModelVariables",
           "load_chkpt_vars", "NonFiniteWeightsError", "CheckpointWriteError",
           # submodules, as tensorpack's star import gives them (`summary.add_moving_summary(...)`)
           "get_tf_version_tuple", "get_global_step_var", "get_global_step_value",
           "summary", "sessinit", "tower", "gradproc", "optimizer"]
