"""TensorFlow internals: the runtime (is it up, eager or graph mode, devices, XLA kernels), its
gradient registry and tapes, TF1's variable store, and editing a graph's ops.

Each function imports ``tensorflow.python`` / ``tensorflow.core`` for one thing no public API
does, and says why. Patches of TF for the whole process are ``patches.py``'s; the TF1 graph of
tensorpack's custom trainers (default session, ``v.op.name``) is ``tf1_graph.py``'s.
"""
from __future__ import annotations

import sys
from contextlib import contextmanager, nullcontext
from typing import List, Optional

from .versions import _tf

__all__ = ["tf_runtime_started", "onednn_enabled", "all_reduce_gradients_released", "eager_mode",
           "eager_is_process_default", "tf2_behavior_in_block", "eager_device_scope", "host_address_space",
           "xla_kernel_device_types", "stop_tape_recording", "convert_variables_to_constants",
           "fresh_tf1_variable_store", "keep_op_in_graph", "replace_op_input"]


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


def onednn_enabled() -> bool:
    """Whether TensorFlow runs its oneDNN kernels (``TF_ENABLE_ONEDNN_OPTS``, or the CPU's default): its
    CPU tensors then come from oneDNN's pooling allocator, whatever ``TF_CPU_ALLOCATOR_USE_BFC`` says.
    No public API tells; an unknown layout says False."""
    try:
        from tensorflow.python.util import _pywrap_util_port
        return bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):
        return False


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
