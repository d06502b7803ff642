"""The old path of ``with_keras_random_state`` (Keras 3's unseeded random ops in replicas); it lives in ``kerastrainer/_internals.py``."""
from .._internals import with_keras_random_state

__all__ = ["with_keras_random_state"]
