"""Mirrors ``tensorpack.tfutils.optimizer``: apply_grad_processors."""
from ..compat.gradproc import apply_grad_processors

__all__ = ["apply_grad_processors"]
