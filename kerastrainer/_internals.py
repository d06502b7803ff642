"""The fence: the one module of kerastrainer that touches Keras and TensorFlow internals.

Everything here imports ``keras.src`` / ``tensorflow.python``, reads or writes a private
attribute of a Keras or TF object, or patches a Keras/TF class or module for the whole
process. Each function says, in one line, why no public API serves. Nothing else in the
package may do any of this (``tests/test_internals_fence.py`` greps the source).

Tested range: TensorFlow 2.21.x with Keras 3.15.x. The installed versions are checked once,
at the first use of a Keras or TF internal (:func:`check_versions`): outside the range a
``RuntimeWarning`` names both versions, once per process. Where an internal has moved and a
fallback would change the numbers (the loss scale of replicas, Dropout and BatchNorm
following ``is_training``, BatchNorm statistics updated twice by LMS, synced moments), the
function raises :class:`InternalsError` naming the internal and both versions instead.

This module imports nothing of kerastrainer's and loads TensorFlow and Keras only when a
function needs them (``utils/`` stays importable without TensorFlow).
"""
from __future__ import annotations

import functools
import sys
import threading
import warnings
from contextlib import contextmanager, nullcontext
from typing import Callable, List, Optional

__all__ = ["TESTED_TENSORFLOW", "TESTED_KERAS", "InternalsError", "check_versions", "installed_versions",
           # Keras
           "keras_training_phase", "with_keras_random_state", "unscale_loss_for_distribution",
           "keras_compile_loss", "keras_compile_metric", "keras_losses_per_replica", "keras_losses_scaled_by",
           "tf_variable_of", "set_tf_variable_of",
           "rekey_optimizer_variables", "optimizer_trainable_variables", "optimizer_slot_lists",
           "optimizer_variable_index", "rmsprop_velocities", "install_batchnorm_moments",
           "require_batchnorm_moments", "batchnorm_reduction_axes", "clear_model_losses",
           "functional_input_structure", "keras_tensor_producer", "sublayers", "layer_draws_random",
           # TensorFlow
           "tf1_optimizer_settings", "tf_runtime_started", "all_reduce_gradients_released", "eager_mode", "eager_is_process_default", "tf2_behavior_in_block", "eager_device_scope",
           "host_address_space", "xla_kernel_device_types", "stop_tape_recording",
           "convert_variables_to_constants", "fresh_tf1_variable_store", "keep_op_in_graph",
           "replace_op_input",
           # process-wide patches
           "install_variable_assign_patch", "install_tf_summary_patch", "restore_attributes", "install_tf1_layers",
           # TF1 default session (tensorpack custom trainers)
           "tf1_default_session", "give_tf1_op_name"]

TESTED_TENSORFLOW = "2.21"   # major.minor of the tested TensorFlow
TESTED_KERAS = "3.15"        # major.minor of the tested Keras


class InternalsError(RuntimeError):
    """A Keras/TF internal kerastrainer relies on is missing, and going on would change results."""


# --- the version check ----------------------------------------------------------------------
_checked = {"done": False}
_check_lock = threading.Lock()


def installed_versions():
    """``(TensorFlow version, Keras version)`` as installed."""
    import keras
    import tensorflow as tf
    return tf.__version__, keras.__version__


def _in_range(version: str, tested: str) -> bool:
    return version == tested or version.startswith(tested + ".")


def check_versions() -> None:
    """Warn once (``RuntimeWarning``) when TensorFlow or Keras is outside the tested range."""
    if _checked["done"]:
        return
    with _check_lock:
        if _checked["done"]:
            return
        _checked["done"] = True
        tf_v, keras_v = installed_versions()
        if not (_in_range(tf_v, TESTED_TENSORFLOW) and _in_range(keras_v, TESTED_KERAS)):
            warnings.warn(
                f"kerastrainer is tested with TensorFlow {TESTED_TENSORFLOW}.x and Keras {TESTED_KERAS}.x; found "
                f"TensorFlow {tf_v} and Keras {keras_v}. It relies on a few of their internals "
                "(kerastrainer/_internals.py); where one has moved it raises rather than change results.",
                RuntimeWarning, stacklevel=3)


def _missing(internal: str, consequence: str, error: Optional[BaseException] = None) -> InternalsError:
    try:
        tf_v, keras_v = installed_versions()
    except Exception:  # noqa: BLE001 - the message still names the internal
        tf_v = keras_v = "?"
    detail = f" ({type(error).__name__}: {error})" if error is not None else ""
    return InternalsError(
        f"kerastrainer needs the internal {internal}, which TensorFlow {tf_v} / Keras {keras_v} does not "
        f"have{detail}. Without it {consequence}, so kerastrainer stops rather than go on. It is tested with "
        f"TensorFlow {TESTED_TENSORFLOW}.x and Keras {TESTED_KERAS}.x: install versions in that range.")


def _keras():
    check_versions()
    import keras
    return keras


def _tf(patching_v1: bool = False):
    check_versions()
    import tensorflow as tf
    if patching_v1:
        # the first `import tensorflow.compat.v1` makes a new module object and rebinds tf.compat.v1 to
        # it: made before any patch of tf.compat.v1, so that a program's later import sees the patches
        # (only then: the module's presence tells the TF1 layer that a program uses TF1's API)
        import tensorflow.compat.v1  # noqa: F401
    return tf


# --- Keras: the training phase and the seed generator of a call --------------------------------
def _keras_global_state():
    # Keras 3 keeps its per-thread call context and seed generator in keras.src's global_state;
    # no public API sets either
    from keras.src.backend.common import global_state
    return global_state


@contextmanager
def keras_training_phase(training: bool):
    """Keras layers called in this block without ``training=`` get ``training``.

    Keras 3 has no global learning phase; its per-thread ``CallContext`` (what an outer layer
    passes to inner ones) is the only way to give calls made outside a layer a default.
    Raises :class:`InternalsError` when Keras moved it (Dropout and BatchNorm in towers would
    stop following ``is_training``).
    """
    _keras()
    try:
        state = _keras_global_state()
        from keras.src.layers.layer import CallContext
    except ImportError as e:
        raise _missing("keras.src.layers.layer.CallContext (Keras's per-thread call context)",
                       "Keras layers called in a tower without training= (Dropout, BatchNormalization) would "
                       "not follow the tower's is_training", e) from e
    if state.get_global_attribute("current_call_ctx") is not None:
        yield  # already inside a Keras call: its own context decides
        return
    ctx = CallContext(entry_layer=None)
    ctx.training = bool(training)
    state.set_global_attribute("current_call_ctx", ctx)
    try:
        yield
    finally:
        state.set_global_attribute("current_call_ctx", None)


def with_keras_random_state(fn: Callable) -> Callable:
    """``fn``, run in any thread with the calling thread's Keras global seed generator.

    Keras keeps its global SeedGenerator per thread in keras.src's global state (no public
    accessor), and ``tf.distribute`` traces each replica in a thread of its own. Without the
    generator (or without the internal: Keras's own behaviour, which works or fails loudly)
    ``fn`` is returned unchanged.
    """
    _keras()
    try:
        state = _keras_global_state()
        from keras.src.random.seed_generator import GLOBAL_SEED_GENERATOR as name
    except ImportError:  # another Keras layout: replicas keep Keras's own behaviour (no silent change)
        return fn
    gen = state.get_global_attribute(name)
    if gen is None:
        return fn

    @functools.wraps(fn)
    def run(*args, **kwargs):
        if state.get_global_attribute(name) is not None:  # this thread has its own
            return fn(*args, **kwargs)
        state.set_global_attribute(name, gen)
        try:
            return fn(*args, **kwargs)
        finally:
            state.set_global_attribute(name, None)
    return run


# --- Keras: losses and metrics as compile resolves them ------------------------------------
def unscale_loss_for_distribution(value):
    """Undo Keras's division of a mean loss by the number of replicas (the trainer averages itself).

    Keras 3 applies the division inside ``Loss.__call__`` with no switch to turn it off.
    Raises :class:`InternalsError` when the function moved (the loss would be off by the
    number of replicas).
    """
    _keras()
    try:
        from keras.src.losses.loss import unscale_loss_for_distribution as unscale
    except ImportError as e:
        raise _missing("keras.src.losses.loss.unscale_loss_for_distribution",
                       "every Keras mean loss would be divided by the number of replicas", e) from e
    return unscale(value)


_per_replica = threading.local()
_per_replica_patch = {"done": False}
_per_replica_lock = threading.Lock()


def _is_one(factor) -> bool:
    return isinstance(factor, (int, float)) and factor == 1


def _patch_keras_replica_scaling() -> None:
    """Wrap Keras's ``scale_loss_for_distribution`` / ``unscale_loss_for_distribution`` once: in a
    thread with a factor set (:func:`keras_losses_scaled_by`) they multiply / divide by it instead of
    dividing / multiplying by the number of replicas (replicas trace in threads of their own)."""
    _keras()
    if _per_replica_patch["done"]:
        return
    with _per_replica_lock:
        if _per_replica_patch["done"]:
            return
        try:
            from keras.src.losses import loss as loss_module
            scale_original = loss_module.scale_loss_for_distribution
            unscale_original = loss_module.unscale_loss_for_distribution
        except (ImportError, AttributeError) as e:
            raise _missing("keras.src.losses.loss.scale_loss_for_distribution",
                           "a Keras loss would be divided by the number of replicas whatever each replica's "
                           "share of the batch", e) from e

        def scale(value):
            factor = getattr(_per_replica, "factor", None)
            if factor is None:
                return scale_original(value)
            return value if _is_one(factor) else value * _tf().cast(factor, value.dtype)

        def unscale(value):
            factor = getattr(_per_replica, "factor", None)
            if factor is None:
                return unscale_original(value)
            tf = _tf()
            return value if _is_one(factor) else tf.math.divide_no_nan(value, tf.cast(factor, value.dtype))
        scale._kerastrainer_original = scale_original
        unscale._kerastrainer_original = unscale_original
        loss_module.scale_loss_for_distribution = scale
        loss_module.unscale_loss_for_distribution = unscale
        _per_replica_patch["done"] = True


@contextmanager
def keras_losses_scaled_by(factor):
    """In this context, in this thread, Keras scales a mean loss by ``factor`` (a number or a scalar
    tensor: the replica's share of the global batch) where it would divide it by the number of
    replicas, and its loss trackers divide by ``factor`` where they would multiply.

    Keras divides a mean loss by the replicas inside ``keras.src.losses.loss`` with no switch; with a
    replica's share instead, replicas of an unevenly split batch (47 and 46 samples of 93) sum to the
    whole batch's mean loss and gradient. Raises :class:`InternalsError` when the functions moved."""
    _patch_keras_replica_scaling()
    before = getattr(_per_replica, "factor", None)
    _per_replica.factor = factor
    try:
        yield
    finally:
        _per_replica.factor = before


def keras_losses_per_replica():
    """In this context, in this thread, a Keras loss (``Loss.__call__``, in a layer's ``add_loss``)
    is not divided by the number of replicas: kerastrainer averages the replicas itself."""
    return keras_losses_scaled_by(1)


# identifiers whose meaning compile picks from the shapes; keras.losses/metrics.get would differ
_SHAPE_DEPENDENT = {"accuracy", "acc", "crossentropy", "ce"}


def _compile_utils(attr: str, identifier):
    try:
        from keras.src.trainers import compile_utils
        return getattr(compile_utils, attr)
    except (ImportError, AttributeError) as e:
        if isinstance(identifier, str) and identifier in _SHAPE_DEPENDENT:
            raise _missing(f"keras.src.trainers.compile_utils.{attr}",
                           f"{identifier!r} would not pick its binary, categorical or sparse form from the "
                           "shapes as Keras's compile does", e) from e
        return None


def keras_compile_loss(identifier, y_true, y_pred):
    """The loss ``keras.Model.compile`` makes of ``identifier`` for these shapes, or None where the
    internal is missing and the identifier does not depend on the shapes (no public API:
    compile's resolution of ``'crossentropy'`` lives in keras.src.trainers.compile_utils)."""
    _keras()
    get = _compile_utils("get_loss", identifier)
    return get(identifier, y_true, y_pred) if get is not None else None


def keras_compile_metric(identifier, y_true, y_pred):
    """As :func:`keras_compile_loss`, for a metric (``'accuracy'``)."""
    _keras()
    get = _compile_utils("get_metric", identifier)
    return get(identifier, y_true, y_pred) if get is not None else None


# --- Keras variables and optimizers ---------------------------------------------------------
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


# --- Keras layers and models ------------------------------------------------------------------
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


# --- TensorFlow runtime, graphs and ops -------------------------------------------------------
def tf_runtime_started() -> bool:
    """Whether TensorFlow's runtime is up (XLA may have read XLA_FLAGS already): the eager context's
    ``_context_handle`` is the only sign. Never imports TensorFlow; an unknown layout says True.
    (No version check here: this runs before Keras may be imported.)"""
    if "tensorflow" not in sys.modules:
        return False
    try:
        from tensorflow.python.eager import context
        return context.context()._context_handle is not None
    except Exception:  # noqa: BLE001  (an unknown TF layout: assume the worst)
        return True


@contextmanager
def all_reduce_gradients_released():
    """Around a training: forget, at its end, the gradient functions that tf.distribute's
    ``ReplicaContext.all_reduce`` registered while it traced (Keras optimizers call it at every
    update). TF registers one per graph-mode trace, in its process-wide gradient registry, under a
    new name, and keeps it for the life of the process with the traced graph it closes over (and
    what that graph holds): no public API removes one. None is needed once its trace is done (the
    gradient is taken while tracing). An unknown registry layout removes nothing."""
    try:
        _tf()
        from tensorflow.python.framework import ops
        registry = ops._gradient_registry._registry
        before = set(registry)
    except Exception:  # noqa: BLE001  (another layout: leave the registry alone)
        yield
        return
    try:
        yield
    finally:
        for name in set(registry) - before:
            if name.startswith("CustomGradient-") and _closes_over_all_reduce(registry.get(name)):
                registry.pop(name, None)


def _closes_over_all_reduce(entry) -> bool:
    """Whether a registry entry is the gradient function of ``ReplicaContext.all_reduce``'s
    ``grad_wrapper`` (found in the closures of TF's ``custom_gradient`` wrappers)."""
    todo = [entry.get("type")] if isinstance(entry, dict) else []
    for _ in range(4):
        found = []
        for fn in todo:
            if "all_reduce.<locals>.grad_wrapper" in getattr(fn, "__qualname__", ""):
                return True
            for cell in getattr(fn, "__closure__", None) or ():
                try:
                    value = cell.cell_contents
                except ValueError:   # an empty cell
                    continue
                if callable(value):
                    found.append(value)
        todo = found
    return False


def eager_mode():
    """A context that runs eagerly inside a TF1 ``Graph().as_default()`` block (TF's own switch;
    ``tf.init_scope`` would leave the graph only for variable creation)."""
    _tf()
    from tensorflow.python.eager import context
    return context.eager_mode()


def eager_is_process_default() -> bool:
    """Whether eager execution is the process's default mode (False after
    ``tf.compat.v1.disable_eager_execution()``): TF's module flag, read without starting a thread
    (the public way is ``tf.executing_eagerly()`` in a fresh thread, 0.5 ms a call)."""
    _tf()
    from tensorflow.python.eager import context
    return context.default_execution_mode == context.EAGER_MODE


@contextmanager
def tf2_behavior_in_block():
    """Runs the block with TF2's process-wide behaviour, then gives the program back its own: after
    ``tf.compat.v1.disable_eager_execution()`` / ``disable_v2_behavior()``, eager execution (the
    calling thread's, and the default of every thread started in the block), TF2 shapes, resource
    variables, tensor equality, control flow v2 and tf.data's v2 classes. TF's public switches go
    one way only (``enable_v2_behavior`` refuses once a graph was used), hence its module flags."""
    _tf()
    from tensorflow.python import tf2
    from tensorflow.python.compat import v2_compat
    from tensorflow.python.eager import context
    from tensorflow.python.framework import tensor, tensor_shape
    from tensorflow.python.ops import control_flow_util, resource_variables_toggle

    def state():
        return (tf2.enabled(), context.default_execution_mode, tensor_shape._TENSORSHAPE_V2_OVERRIDE,
                resource_variables_toggle._DEFAULT_USE_RESOURCE, tensor.Tensor._USE_EQUALITY,
                control_flow_util.ENABLE_CONTROL_FLOW_V2)

    def apply(v2, mode, shape_v2, resource, equality, control_flow_v2):
        changed_v2 = tf2.enabled() != v2
        tf2.enable() if v2 else tf2.disable()
        context.default_execution_mode = mode
        tensor_shape._TENSORSHAPE_V2_OVERRIDE = shape_v2
        resource_variables_toggle._DEFAULT_USE_RESOURCE = resource
        tensor.Tensor._USE_EQUALITY = equality
        control_flow_util.ENABLE_CONTROL_FLOW_V2 = control_flow_v2
        if changed_v2:   # tf.data's module aliases follow tf2.enabled() through these callbacks
            for name in v2_compat._DATA_V2_CALLBACKS.list():
                v2_compat._DATA_V2_CALLBACKS.lookup(name)()

    saved = state()
    # the calling thread's mode is read when it first meets the context: made now, before the switch,
    # or this thread would stay eager after the block (the context may not exist yet)
    context.context()._thread_local_data.is_eager  # noqa: B018
    apply(True, context.EAGER_MODE, True, True, True, True)
    try:
        with context.eager_mode():
            yield
    finally:
        apply(*saved)


def eager_device_scope() -> str:
    """The device of the enclosing ``with tf.device(...)`` while executing eagerly ('' without one);
    no public API reads it (an eager op's ``.device`` says where it landed instead)."""
    _tf()
    from tensorflow.python.eager import context
    return context.context().device_name or ""


def host_address_space() -> str:
    """This process's ``/job:.../replica:.../task:...`` prefix in a multi-worker runtime ('' alone);
    ``tf.config.list_logical_devices`` lists every worker's devices without saying whose."""
    _tf()
    from tensorflow.python.eager import context
    return context.context().host_address_space()


def xla_kernel_device_types(op_type: str) -> List[str]:
    """The device types (``'XLA_CPU_JIT'``...) with a kernel registered for ``op_type``: no public API
    lists the XLA kernels of an op."""
    _tf()
    from tensorflow.python.framework import kernels
    return [kd.device_type for kd in kernels.get_registered_kernels_for_op(op_type).kernel]


def stop_tape_recording():
    """A context in which the active gradient tapes record nothing (``tf.GradientTape.stop_recording``
    serves one tape object; LMS needs every enclosing tape, which it does not hold)."""
    _tf()
    from tensorflow.python.eager import record
    return record.stop_recording()


def convert_variables_to_constants(concrete_function):
    """The concrete function with its variables frozen into constants (TF has no public form of
    ``convert_variables_to_constants_v2``; TF1's ``graph_util`` needs a session)."""
    _tf()
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2
    return convert_variables_to_constants_v2(concrete_function)


def fresh_tf1_variable_store(known: Optional[dict] = None):
    """A context with a new TF1 name -> variable table (``variable_scope._VariableStore``): TF2 shares
    one between traces, and no public API replaces it. ``known`` ({name: variable}) fills the table
    (its ``_vars``), so that a ``get_variable`` under ``reuse=True`` (a replica's thread in
    ``MirroredStrategy``) finds the variables an earlier trace made. A TF without it gets a null
    context (a second trace then fails loudly with duplicate names; nothing changes silently)."""
    _tf()
    try:
        from tensorflow.python.ops import variable_scope as vs
        store = vs._VariableStore()
        store._vars.update(known or {})
        return vs.with_variable_store(store)
    except (ImportError, AttributeError):
        return nullcontext()


def keep_op_in_graph(op) -> None:
    """Mark ``op`` so grappler keeps it (``_grappler_do_not_remove``, set through ``op._set_attr``:
    no public API sets an attribute of an existing op)."""
    _tf()
    from tensorflow.core.framework import attr_value_pb2
    op._set_attr("_grappler_do_not_remove", attr_value_pb2.AttrValue(b=True))


def replace_op_input(op, index: int, tensor) -> None:
    """Make ``op`` read ``tensor`` as its input ``index`` (``op._update_input``: the only edge-rewrite
    API, stable since TF 1.x; graph_editor is gone)."""
    op._update_input(index, tensor)


# --- process-wide patches ---------------------------------------------------------------------
_assign_patch = {"done": False}
_assign_lock = threading.Lock()


def install_variable_assign_patch(wrap: Callable) -> None:
    """Process-wide patch, once: replace ``assign`` / ``assign_add`` / ``assign_sub`` of
    ``keras.Variable``, TF's ``BaseResourceVariable`` and ``DistributedVariable`` by ``wrap(method)``
    (what LMS's recompute pass uses to skip updates of non-trainable variables; TF has no hook on
    assignments). The wrapped method carries ``_lms_wrapped = True`` and is never wrapped twice.
    Raises :class:`InternalsError` when a TF variable class moved (BatchNorm statistics would be
    updated twice by a recomputed block).
    """
    with _assign_lock:
        if _assign_patch["done"]:
            return
        keras = _keras()
        try:
            from tensorflow.python.distribute import values as dist_values
            from tensorflow.python.ops import resource_variable_ops
            classes = [keras.Variable, resource_variable_ops.BaseResourceVariable,
                       dist_values.DistributedVariable]
        except (ImportError, AttributeError) as e:
            raise _missing("tensorflow.python's BaseResourceVariable / DistributedVariable",
                           "a recomputed block would update BatchNorm's moving statistics a second time", e) from e
        for cls in classes:
            for meth in ("assign", "assign_add", "assign_sub"):
                orig = cls.__dict__.get(meth)
                if orig is None:
                    # inherited: patch on the class that defines it (found via the MRO)
                    orig = getattr(cls, meth, None)
                if orig is None or getattr(orig, "_lms_wrapped", False):
                    continue
                setattr(cls, meth, wrap(orig))
        _assign_patch["done"] = True


def install_tf_summary_patch(wrap_v2: Callable, kinds_v2, wrap_v1: Optional[Callable] = None,
                             kinds_v1=()) -> List[tuple]:
    """Patch: replace ``tf.summary.<kind>`` (and ``tf.compat.v2.summary``) by ``wrap_v2(kind,
    original)`` for each kind of ``kinds_v2``, and ``tf.compat.v1.summary.<kind>`` by
    ``wrap_v1(kind, original)`` for ``kinds_v1``: a tower has no summary writer, and TF offers no
    hook on these functions. A function already wrapped (it has ``_kerastrainer_original``) is kept.
    Returns ``(module, kind, original)`` of each replacement made, for :func:`restore_attributes`.
    """
    tf = _tf(patching_v1=wrap_v1 is not None)
    replaced = []
    for module in {id(m): m for m in (tf.summary, tf.compat.v2.summary)}.values():
        for kind in kinds_v2:
            fn = getattr(module, kind, None)
            if fn is not None and not hasattr(fn, "_kerastrainer_original"):
                setattr(module, kind, wrap_v2(kind, fn))
                replaced.append((module, kind, fn))
    if wrap_v1 is None:
        return replaced
    v1 = tf.compat.v1.summary
    for kind in kinds_v1:
        fn = getattr(v1, kind, None)
        if fn is not None and not hasattr(fn, "_kerastrainer_original"):
            setattr(v1, kind, wrap_v1(kind, fn))
            replaced.append((v1, kind, fn))
    return replaced


def restore_attributes(replaced: List[tuple]) -> None:
    """Undo replacements ``(module, name, original)`` whose wrapper is still in place."""
    for module, name, original in reversed(replaced):
        current = getattr(module, name, None)
        if getattr(current, "_kerastrainer_original", None) is original:
            setattr(module, name, original)


def install_tf1_layers(module) -> bool:
    """Process-wide patch: make ``tf.compat.v1.layers`` ``module`` when TF's own cannot load (with
    Keras 3 its lazy loader fails on the missing Keras 2 package at the first attribute, so nothing
    that works is replaced). Returns whether it was installed.
    """
    import importlib
    tf = _tf(patching_v1=True)
    # `import tensorflow.compat.v1` makes a module object of its own (and rebinds tf.compat.v1):
    # every object a program may reach as tensorflow.compat.v1 gets the module
    modules = {id(m): m for m in (tf.compat.v1, importlib.import_module("tensorflow.compat.v1"),
                                  sys.modules.get("tensorflow._api.v2.compat.v1")) if m is not None}
    for v1 in modules.values():
        current = v1.__dict__.get("layers")
        if current is module:
            continue
        try:
            getattr(current, "conv2d")
            return False   # TF's tf.layers loads (Keras 2 installed): kept
        except Exception:  # noqa: BLE001 - ModuleNotFoundError from the lazy loader, or no attribute
            pass
        setattr(v1, "layers", module)
    return True


# --- TF1 default session (tensorpack's custom trainers) -----------------------------------------
@contextmanager
def tf1_default_session(session):
    """Make ``session`` (any object with ``graph`` and ``run(fetches, feed_dict)``) TF1's default
    session, so that ``op.run()`` / ``tensor.eval()`` in a callback use it: TF's public
    ``Session.as_default()`` takes only a real ``tf.compat.v1.Session``, which TF2 code cannot run."""
    from tensorflow.python.framework import stack
    check_versions()
    with stack.default_session(session):
        yield session


_tf1_op_classes: dict = {}


class _TF1VariableOp:
    """What TF1 code reads of a variable's op (``v.op.name``, ``v.op.type``, ``v.op.graph``) for a
    variable made eagerly for a TF1 graph."""

    type = "VarHandleOp"

    def __init__(self, name: Callable[[], str], graph):
        self._name = name
        self.graph = graph

    @property
    def name(self) -> str:
        return self._name()

    def __repr__(self):
        return f"<variable op {self.name!r}>"


def give_tf1_op_name(var, graph, name: Callable[[], str]):
    """Let TF1 code read ``var.op.name`` (``name()``) of a variable made eagerly for the TF1 graph ``graph`` (its
    handle is an eager tensor, whose ``.op`` raises): ``v.op.name`` is TF1's way to name a variable,
    and TF2 has no public hook on ``ResourceVariable.op``. Done by switching the instance to a
    subclass whose ``op`` is a stand-in carrying the name and ``graph``, in every context (TF1's
    optimizers key their slots by ``(v.op.graph, v.op.name)`` once ``v.op`` exists: one key
    whether they run eagerly or in the graph)."""
    check_versions()
    cls = type(var)
    if not isinstance(getattr(cls, "op", None), property):
        return var
    base = getattr(cls, "_kerastrainer_tf1_base", cls)
    sub = _tf1_op_classes.get(base)
    if sub is None:
        original = base.op

        def op(self):
            stand_in = self.__dict__.get("_kerastrainer_tf1_op")
            return stand_in if stand_in is not None else original.fget(self)
        sub = type(base.__name__, (base,), {"op": property(op, doc=original.__doc__), "_kerastrainer_tf1_base": base,
                                           "__module__": base.__module__, "__qualname__": base.__qualname__})
        _tf1_op_classes[base] = sub
    var.__class__ = sub
    var.__dict__["_kerastrainer_tf1_op"] = _TF1VariableOp(name, graph)
    return var


class _KerasOptimizerTF1Methods:
    """Patch, for a block: ``minimize`` and ``apply_gradients`` on the Keras optimizer class, so that
    a custom trainer's TF1 graph code (``opt.minimize(loss, var_list=..., name=...)``) can use a Keras 3
    optimizer it made itself (no hook of Keras lets another object answer for it). Restored when the
    block ends; ``original_apply_gradients`` is Keras's own, found through the MRO."""

    _MISSING = object()

    def __init__(self):
        self.original_apply_gradients = None

    @contextmanager
    def __call__(self, cls, minimize: Callable, apply_gradients: Callable):
        saved = {n: cls.__dict__.get(n, self._MISSING) for n in ("minimize", "apply_gradients")}
        if self.original_apply_gradients is None:
            self.original_apply_gradients = next(k.__dict__["apply_gradients"] for k in cls.__mro__
                                                 if "apply_gradients" in k.__dict__)
        cls.minimize, cls.apply_gradients = minimize, apply_gradients
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is self._MISSING:
                    delattr(cls, name)
                else:
                    setattr(cls, name, value)


keras_optimizer_tf1_methods = _KerasOptimizerTF1Methods()
