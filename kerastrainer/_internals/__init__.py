"""The fence: the one package of kerastrainer that touches Keras and TensorFlow internals.

Everything in it imports ``keras.src`` / ``tensorflow.python``, reads or writes a private
attribute of a Keras or TF object, or patches a Keras/TF class or module for the whole
process. Each function says, in one line, why no public API serves. Nothing else in the
package may do any of this (``tests/test_internals_fence.py`` greps the source).

One module per concern, and this ``__init__`` re-exports their names (callers write
``from kerastrainer._internals import tf_variable_of``):

- ``versions.py``: the tested range (TensorFlow 2.21.x, Keras 3.15.x), checked once at the
  first use of an internal (one ``RuntimeWarning`` outside it), and :class:`InternalsError`;
- ``keras_calls.py``: a Keras call's training phase and seed generator, the loss scale of
  replicas;
- ``keras_data.py``: the order in which ``keras.Model.fit`` reads numpy arrays (its array adapter);
- ``keras_objects.py``: private attributes of Keras variables, optimizers, layers and models;
- ``tf_runtime.py``: TF's runtime, modes, devices, gradient registry, TF1 variable store, op edits;
- ``patches.py``: process-wide patches (variable assignment, ``tf.summary.*``, ``tf.compat.v1.layers``);
- ``tf1_graph.py``: what tensorpack's custom trainers' TF1 graph code needs (default session,
  ``v.op.name``, a Keras optimizer's ``minimize``).

Where an internal has moved and a fallback would change the numbers (the loss scale of
replicas, Dropout and BatchNorm following ``is_training``, BatchNorm statistics updated twice
by LMS, synced moments), the function raises :class:`InternalsError` naming the internal and
both versions instead.

The fence imports nothing of kerastrainer's and loads TensorFlow and Keras only when a
function needs them (``utils/`` stays importable without TensorFlow).
"""
from .keras_calls import (keras_forward_losses_unscaled, keras_losses_scaled_by, keras_training_phase,
                          with_keras_random_state)
from .keras_data import keras_array_batch_indices
from .keras_objects import (batchnorm_reduction_axes, clear_model_losses, compiled_metrics_of,
                            functional_input_structure,
                            install_batchnorm_moments, keras_tensor_producer, layer_draws_random,
                            optimizer_slot_lists, optimizer_trainable_variables, optimizer_variable_index,
                            rekey_optimizer_variables, require_batchnorm_moments, rmsprop_velocities,
                            set_tf_variable_of, sublayers, tf1_optimizer_settings, tf_variable_of)
from .patches import install_tf1_layers, install_tf_summary_patch, install_variable_assign_patch, restore_attributes
from .tf1_graph import give_tf1_op_name, keras_optimizer_tf1_methods, tf1_default_session
from .tf_runtime import (all_reduce_gradients_released, convert_variables_to_constants, eager_device_scope,
                         eager_is_process_default, eager_mode, fresh_tf1_variable_store, host_address_space,
                         keep_op_in_graph, onednn_enabled, replace_op_input, stop_tape_recording,
                         tf2_behavior_in_block, tf_runtime_started, xla_kernel_device_types)
from .versions import TESTED_KERAS, TESTED_TENSORFLOW, InternalsError, check_versions, installed_versions

__all__ = ["TESTED_TENSORFLOW", "TESTED_KERAS", "InternalsError", "check_versions", "installed_versions",
           # Keras: a call's state and its losses' scale over replicas (keras_calls.py)
           "keras_training_phase", "with_keras_random_state", "keras_forward_losses_unscaled", "keras_losses_scaled_by",
           # Keras's data adapters (keras_data.py)
           "keras_array_batch_indices",
           # Keras objects (keras_objects.py)
           "tf_variable_of", "set_tf_variable_of",
           "rekey_optimizer_variables", "optimizer_trainable_variables", "optimizer_slot_lists",
           "optimizer_variable_index", "rmsprop_velocities", "install_batchnorm_moments",
           "require_batchnorm_moments", "batchnorm_reduction_axes", "clear_model_losses", "compiled_metrics_of",
           "functional_input_structure", "keras_tensor_producer", "sublayers", "layer_draws_random",
           "tf1_optimizer_settings",
           # TensorFlow (tf_runtime.py)
           "tf_runtime_started", "onednn_enabled", "all_reduce_gradients_released", "eager_mode",
           "eager_is_process_default",
           "tf2_behavior_in_block", "eager_device_scope",
           "host_address_space", "xla_kernel_device_types", "stop_tape_recording",
           "convert_variables_to_constants", "fresh_tf1_variable_store", "keep_op_in_graph",
           "replace_op_input",
           # process-wide patches (patches.py)
           "install_variable_assign_patch", "install_tf_summary_patch", "restore_attributes", "install_tf1_layers",
           # tensorpack custom trainers' TF1 graph (tf1_graph.py)
           "tf1_default_session", "give_tf1_op_name", "keras_optimizer_tf1_methods"]
