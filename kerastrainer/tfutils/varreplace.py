"""tensorpack's ``tfutils.varreplace``: TF1 custom getters. They do not reach Keras 3 variables;
these raise, naming the TF2 way."""
from ..utils.tf1_only import tf1_only_function

__all__ = ["custom_getter_scope", "remap_variables", "freeze_variables"]

_WHY = "TF1 custom getters (tf.variable_scope(custom_getter=...)) do not reach Keras 3 layers' variables"

custom_getter_scope = tf1_only_function(
    "custom_getter_scope", __name__, _WHY,
    "Transform the weights where they are used: write the layer with layer_register and read "
    "its variables yourself (see remap_variables' advice).")
remap_variables = tf1_only_function(
    "remap_variables", __name__, _WHY,
    "To use fn(W) instead of W (e.g. DoReFa quantization), write a registered layer that applies "
    "fn to its kernel before the op: @layer_register() def QConv2D(x, ...): W = get_variable('W', ...); "
    "return tf.nn.conv2d(x, fn(W), ...); or a Keras layer whose call() transforms self.kernel.")
freeze_variables = tf1_only_function(
    "freeze_variables", __name__, _WHY,
    "Freeze a layer with `layer.trainable = False` (Keras; a BatchNormalization then also runs in "
    "inference mode), wrap the frozen part's output in tf.stop_gradient(...), or filter the "
    "gradients with gradproc.MapGradient(lambda g: None, regex) via apply_grad_processors.")
