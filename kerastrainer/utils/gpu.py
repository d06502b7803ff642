"""Mirrors ``tensorpack.utils.gpu``: GPU counting and selection."""
from .devices import get_num_gpu
from .utils import change_gpu

get_nr_gpu = get_num_gpu  # tensorpack's old name

__all__ = ["get_num_gpu", "get_nr_gpu", "change_gpu"]
