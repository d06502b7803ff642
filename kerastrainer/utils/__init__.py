"""Small helpers shared by every subpackage; nothing here imports TensorFlow."""
from . import logger
from .rng import get_rng

__all__ = ["logger", "get_rng"]
