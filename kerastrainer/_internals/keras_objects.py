"""Private attributes of Keras objects: a variable's backend ``tf.Variable``, an optimizer's slots
and indices, BatchNormalization's moments, a model's losses, inputs and sublayers (and the
settings a TF1 optimizer keeps only in private attributes).

Each function reads or writes one private attribute, and says why no public API serves. The
state of a Keras call (training phase, seeds, loss scaling) is ``keras_calls.py``'s; TF's
runtime and graphs ``tf_runtime.py``'s; process-wide patches ``patches.py``'s.
"""
from __future__ import annotations

from typing import Callable

from .versions import _keras, _missing, _tf

__all__ = ["tf_variable_of", "set_tf_variable_of", "rekey_optimizer_variables", "optimizer_trainable_variables",
           "optimizer_slot_lists", "optimizer_variable_index", "rmsprop_velocities", "tf1_optimizer_settings",
           "install_batchnorm_moments", "require_batchnorm_moments", "batchnorm_reduction_axes", "clear_model_losses",
           "compiled_metrics_of", "functional_input_structure", "keras_tensor_producer", "sublayers", "layer_draws_random"]


def tf_variable_of(v):
    """The ``tf.Variable`` behind a Keras 3 variable (``v._value``), else ``v`` itself.

    Keras exposes only ``.value`` (a tensor, autocast); the variable object itself is needed
    to key slots and to place it on a strategy. Raises :class:`InternalsError` when a Keras
    variable has no ``_value``.
    """
    keras = _keras()
    if not isinstance(v, keras.Variable):
        return v
    try:
        inner = v._value
    except AttributeError as e:
        raise _missing("keras.Variable._value (the backend variable)",
                       "variables could not be placed on the strategy nor matched to their gradients", e) from e
    import tensorflow as tf
    return inner if isinstance(inner, tf.Variable) else v


def set_tf_variable_of(v, tf_variable) -> None:
    """Make the Keras variable ``v`` wrap ``tf_variable`` (its ``_value``): no public API swaps the
    backend variable of a Keras variable, which keeps the user's model object the trained one."""
    _keras()
    v._value = tf_variable


def rekey_optimizer_variables(o) -> None:
    """Point a Keras optimizer at the current strategy and re-index its slots by the current
    backend variables (its ``_distribution_strategy`` and ``_trainable_variables_indices``,
    captured at creation and build; Keras has no public way to refresh them)."""
    tf = _tf()
    if hasattr(o, "_distribution_strategy"):
        o._distribution_strategy = tf.distribute.get_strategy()
    if getattr(o, "built", False) and hasattr(o, "_trainable_variables_indices"):
        o._trainable_variables_indices = {o._var_key(v): i for i, v in enumerate(o._trainable_variables)}


def optimizer_trainable_variables(o) -> list:
    """The variables a built Keras optimizer holds slots for, in its order (``_trainable_variables``:
    the public ``variables`` lists slots, not what they belong to)."""
    _keras()
    return list(getattr(o, "_trainable_variables", None) or [])


def optimizer_slot_lists(o) -> list:
    """``[(slot name, list)]``: every list attribute of an optimizer but its variable lists, by name
    without the leading ``_`` (Keras keeps slots in private lists, ``_momentums``...; no public
    API says which slot belongs to which variable)."""
    _keras()
    out = []
    for attr in sorted(vars(o)):
        val = getattr(o, attr, None)
        if attr in ("_trainable_variables", "_variables") or not isinstance(val, (list, tuple)):
            continue
        out.append((attr.lstrip("_"), val))
    return out


def optimizer_variable_index(opt, variable) -> int:
    """The index of ``variable`` in a Keras optimizer's slot lists (``_get_variable_index``: Keras's
    own optimizers call it from ``update_step``; it has no public name)."""
    return opt._get_variable_index(variable)


def rmsprop_velocities(opt) -> list:
    """The mean-square slots of a built ``keras.optimizers.RMSprop`` (``_velocities``, no public name)."""
    return opt._velocities


def tf1_optimizer_settings(opt) -> dict:
    """A ``tf.compat.v1.train`` optimizer's constructor arguments, by name without the leading
    ``_`` (``momentum``, ``use_nesterov``, ``lr`` / ``learning_rate``...): TF1 optimizers keep them
    only in private attributes and have no ``get_config``."""
    _tf()
    return {k.lstrip("_"): v for k, v in vars(opt).items() if k.startswith("_")}


def install_batchnorm_moments(cls, moments: Callable) -> None:
    """Make ``cls`` (a ``keras.layers.BatchNormalization`` subclass) compute its batch moments with
    ``moments(layer, inputs, mask, keras_moments)``: Keras's ``_moments`` is the only hook between the
    batch and the normalisation. Installed when the subclass is defined; a Keras without the hook
    leaves ``cls`` unchanged and :func:`require_batchnorm_moments` raises where it is needed.
    """
    import keras
    base = keras.layers.BatchNormalization
    keras_moments = getattr(base, "_moments", None)
    if keras_moments is None:
        return

    def _moments(self, inputs, mask):
        return moments(self, inputs, mask, lambda i, m: keras_moments(self, i, m))
    cls._moments = _moments


def require_batchnorm_moments() -> None:
    """Raise :class:`InternalsError` when ``BatchNormalization._moments`` is missing (synced batch
    moments would silently be each rank's own)."""
    keras = _keras()
    if getattr(keras.layers.BatchNormalization, "_moments", None) is None:
        raise _missing("keras.layers.BatchNormalization._moments",
                       "horovod_sync=True would normalise with each rank's own batch moments")


def batchnorm_reduction_axes(layer) -> list:
    """The axes a BatchNormalization reduces over (``_reduction_axes``, set in build; no public name)."""
    return layer._reduction_axes


def clear_model_losses(model) -> None:
    """Clear a Keras layer's ``add_loss`` losses of its last call (``_clear_losses``: Keras clears them
    only when the layer is the outermost call). Raises :class:`InternalsError` when a Keras layer
    lacks it (the losses of the last trace would be added again)."""
    keras = _keras()
    clear = getattr(model, "_clear_losses", None)
    if clear is None:
        if isinstance(model, keras.layers.Layer):
            raise _missing("keras.layers.Layer._clear_losses",
                           "the add_loss losses of an earlier trace would be added to the loss again")
        return
    clear()


def compiled_metrics_of(model):
    """The metric that holds compile's metrics of a compiled model (``_compile_metrics``, a Keras
    ``CompileMetrics``; ``model.metrics`` lists it as one), or None when none were compiled."""
    _keras()
    return getattr(model, "_compile_metrics", None)


def functional_input_structure(model):
    """The nested structure of a functional model's inputs (a dict keeps its keys), or None
    (``_inputs_struct``; ``model.inputs`` is flat)."""
    _keras()
    return getattr(model, "_inputs_struct", None)


def keras_tensor_producer(t):
    """The layer (operation) that made a symbolic Keras tensor, or None (``_keras_history``; no public
    accessor)."""
    _keras()
    return getattr(getattr(t, "_keras_history", None), "operation", None)


def sublayers(layer, recursive: bool) -> list:
    """The layers inside ``layer`` (not itself), direct or all (``_flatten_layers``: ``Model.layers``
    misses layers held in attributes of subclassed layers and has no recursive form)."""
    _keras()
    return list(layer._flatten_layers(include_self=False, recursive=recursive))


def layer_draws_random(layer) -> bool:
    """Whether a layer holds a ``SeedGenerator`` in its attributes (Keras lists them nowhere public)."""
    return any(type(v).__name__ == "SeedGenerator" for v in vars(layer).values())
