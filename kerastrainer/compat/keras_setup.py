"""tensorpack's ``contrib.keras.setup_keras_trainer`` (its KerasModel's internal step). It raises."""
from ..utils.tf1_only import tf1_only_function

__all__ = ["setup_keras_trainer"]

setup_keras_trainer = tf1_only_function(
    "setup_keras_trainer", __name__,
    "tensorpack's internal set-up of a TF1 trainer around a Keras model is not a public step",
    "Use KerasModel(get_model, input_signature, target_signature, input, trainer).compile(...) "
    "then .fit(...), which does this set-up.")
