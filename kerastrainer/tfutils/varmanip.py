"""Mirrors ``tensorpack.tfutils.varmanip`` (an alias module: its names only, no logic).

kerastrainer's checkpoints by name live in ``checkpoint_write.py`` (the names, the format,
the writer), ``checkpoint_read.py``, ``checkpoint_match.py``, ``checkpoint_load.py`` and
``checkpoint_files.py``; tensorpack's array helpers in ``variable_values.py``.
"""
from .checkpoint_files import get_all_checkpoints, get_checkpoint_path
from .checkpoint_read import load_checkpoint_vars, load_chkpt_vars
from .variable_values import SessionUpdate, dump_session_params, save_checkpoint_vars, save_chkpt_vars

__all__ = ["SessionUpdate", "dump_session_params", "get_all_checkpoints", "get_checkpoint_path",
           "load_checkpoint_vars", "load_chkpt_vars", "save_checkpoint_vars", "save_chkpt_vars"]
