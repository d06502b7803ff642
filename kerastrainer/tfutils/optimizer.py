"""Mirrors ``tensorpack.tfutils.optimizer``: apply_grad_processors, AccumGradOptimizer."""
from ..compat.gradproc import AccumGradOptimizer, apply_grad_processors

__all__ = ["apply_grad_processors", "AccumGradOptimizer"]
