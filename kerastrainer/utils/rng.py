"""Per-object random generators that differ across processes and objects."""
from __future__ import annotations

import os
from datetime import datetime

import numpy as np

_RNG_SEED = None


def fix_rng_seed(seed: int) -> None:
    """Make every later :func:`get_rng` deterministic (call before building DataFlows)."""
    global _RNG_SEED
    _RNG_SEED = int(seed)


def get_rng(obj=None) -> np.random.RandomState:
    """A RandomState seeded from the object's id, the process id and the time.

    With :func:`fix_rng_seed` set, the seed is fixed instead, so runs repeat.
    """
    seed = (id(obj) + os.getpid() + int(datetime.now().strftime("%Y%m%d%H%M%S%f"))) % 4294967295
    if _RNG_SEED is not None:
        seed = _RNG_SEED
    return np.random.RandomState(seed)
