"""The old path of ``keras_training_phase`` (Keras layers in a tower follow its ``is_training``); it lives in ``kerastrainer/_internals.py``."""
from .._internals import keras_training_phase

__all__ = ["keras_training_phase"]
