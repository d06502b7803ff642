"""TF1 idioms of tensorpack programs, translated to TF2 and Keras 3.

``tfv1`` is ``tf.compat.v1``, as in tensorpack (``from kerastrainer import tfv1 as tf``).
Inside a tower function and in ``ModelDesc.optimizer()``:

- ``tfv1.get_variable(name, ...)`` creates the variable once in the model's layer store
  and returns the same variable in every later trace and tower;
- ``get_global_step_var()`` is the trainer's step counter, incremented in-graph after
  every step, so a ``tfv1.train.exponential_decay`` of it moves during training;
- ``optimizer()`` may return a ``tfv1.train`` optimizer: it is translated to the Keras 3
  optimizer with the same update rule (logged once). See docs/tensorpack-migration.md.

Example::

    from kerastrainer import *
    from kerastrainer.compat import tfv1 as tf

    class Model(ModelDesc):
        def optimizer(self):
            lr = tf.get_variable('learning_rate', initializer=0.1, trainable=False)
            return tf.train.MomentumOptimizer(lr, 0.9)   # -> keras SGD-style momentum, TF1 maths
"""
import tensorflow as tf
# the first `import tensorflow.compat.v1` makes a new module object and rebinds tf.compat.v1: done
# before the patches below, so that `import tensorflow.compat.v1 as tf` in a program sees them
import tensorflow.compat.v1  # noqa: F401,E402

from ..tfutils import extensions as _extensions
from ..tfutils.global_step import get_global_step_value, get_global_step_var
from .graph_mode import eager_inside_tf1_graph
from .optimizer import call_optimizer, translate_optimizer
from .summary import install_tf1_summaries
from ..tfutils.tensors import get_op_tensor_name, get_tf_version_tuple
from .variables import tf1_variables_in_store
from . import tf_layers as _tf_layers
from .._internals import install_tf1_layers
from ..tfutils.sessinit import get_model_loader  # tensorpack's older name of SmartInit

tfv1 = tf.compat.v1

# compat reaches the core only through its hooks (tfutils/extensions.py), registered here:
_extensions.add_tower_context(tf1_variables_in_store)      # tfv1.get_variable in a tower -> the layer store
_extensions.add_tower_context(_tf_layers.tower_call_names)  # tfv1.layers' automatic names, per tower call
_extensions.add_launch_context(eager_inside_tf1_graph)     # training in TF1 graph mode (a Graph block, eager off)
_extensions.set_optimizer_reader(call_optimizer, translate_optimizer)  # tfv1.train optimizers -> Keras
install_tf1_summaries()                                     # tfv1.summary.* in a tower -> the trainer
install_tf1_layers(_tf_layers)                              # tfv1.layers.* (gone with Keras 3) -> Keras 3 layers


def is_tfv2() -> bool:
    """Always True: kerastrainer runs on TensorFlow 2 (tensorpack's ``compat.is_tfv2``)."""
    return True


__all__ = ["tfv1", "is_tfv2", "get_model_loader", "get_global_step_var", "get_global_step_value", "get_op_tensor_name",
           "get_tf_version_tuple"]
