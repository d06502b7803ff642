"""tensorpack's ``models.tflayer`` helper for ``tf.layers``. TF2 has no ``tf.layers``; it raises."""
from ..utils.tf1_only import tf1_only_function

__all__ = ["rename_tflayer_get_variable"]

rename_tflayer_get_variable = tf1_only_function(
    "rename_tflayer_get_variable", __name__, "tf.layers (whose variables it renamed) is gone",
    "Use kerastrainer's functional layers (Conv2D('c', x, ...)), whose variables are already "
    "named as tensorpack names them (c/W, c/b).")
