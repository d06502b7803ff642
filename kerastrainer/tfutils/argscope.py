"""Mirrors ``tensorpack.tfutils.argscope``: argscope and friends."""
from ..models.arg_scope import argscope, enable_argscope_for_function, enable_argscope_for_module, get_arg_scope

__all__ = ["argscope", "get_arg_scope", "enable_argscope_for_function", "enable_argscope_for_module"]
