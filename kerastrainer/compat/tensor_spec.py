"""tensorpack's ``compat.tensor_spec`` path: its ``TensorSpec`` (a copy of TensorFlow's for TF 1.x
before 1.14) is ``tf.TensorSpec``, which TF 2 has.

Example::

    from kerastrainer.compat.tensor_spec import TensorSpec
    TensorSpec((None, 28, 28), tf.float32, 'input')
"""
from tensorflow import TensorSpec

__all__ = ["TensorSpec"]
