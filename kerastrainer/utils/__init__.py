"""Small helpers shared by every subpackage; nothing here imports TensorFlow."""
from . import logger
from .dirlock import LogDirLockedError
from .rng import get_rng
from .utils import change_env, execute_only_once, fix_rng_seed, get_tqdm, humanize_time_delta

__all__ = ["logger", "get_rng", "fix_rng_seed", "change_env", "execute_only_once", "get_tqdm",
           "humanize_time_delta", "LogDirLockedError"]
