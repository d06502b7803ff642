"""TF1 custom getters over the weights of kerastrainer's layers.

In TF1, ``tf.variable_scope(..., custom_getter=f)`` made every ``tf.get_variable`` inside it return
``f(getter, name=..., shape=..., ...)``: tensorpack's layers and ``tf.layers`` got their weights
that way, so a getter that returned ``quantize(getter(...))`` made them compute with quantized
weights (DoReFa-Net), ``tf.stop_gradient(getter(...))`` froze them (``freeze_variables``).

kerastrainer's layers keep Keras 3 weights, which no getter sees when created. Here the getter
is applied where TF1 applied it, once per layer call and per weight, in creation order: before a
layer runs, each of its weights goes through the variable scope's getter (nested getters composed
as TF1 composes them) under its TF1 name (``conv0/W``), and what the getter returns stands in for
the weight during that call (a ``keras.StatelessScope`` maps the variable to it). The weight
itself is created once and trained; gradients reach it through whatever the getter computed.

The innermost ``getter`` a custom getter calls returns a :class:`TF1VariableView`: the layer's
variable under its TF1 name (``v.name == 'conv0/W:0'``, ``v.op.name == 'conv0/W'``) that TF ops
take like the variable. ``trainable=False`` asked of it when the layer is first built makes the
variable non-trainable (TF1 created it outside ``TRAINABLE_VARIABLES``); asked later, it changes
nothing, as in TF1.

Example::

    def quantize(getter, name, *args, **kwargs):
        w = getter(name, *args, **kwargs)
        return tf.round(w * 4.) / 4. if name.endswith('/W') else w

    with tf.compat.v1.variable_scope('q', custom_getter=quantize):
        x = Conv2D('conv0', image, 32, 3)     # computes with round(W * 4) / 4; W itself trains
"""
from __future__ import annotations

import inspect
from typing import Callable, Dict, List, Optional, Tuple

import keras
import tensorflow as tf

from .._internals import tf_variable_of

__all__ = ["active_custom_getter", "through_custom_getters", "variable_through_custom_getter", "TF1VariableView",
           "GetterBoundLayer", "custom_getter_names"]


def active_custom_getter() -> Optional[Callable]:
    """The custom getter of the current TF1 variable scope (the composition of nested ones), or None."""
    return tf.compat.v1.get_variable_scope().custom_getter


def custom_getter_names(getter: Callable) -> str:
    """The user's getters in a (possibly composed) custom getter, innermost scope first, for messages.

    TF1 composes nested getters into a closure of its own; its cells hold the user's functions.
    """
    found: List[str] = []

    def walk(fn, depth=0):
        qual = getattr(fn, "__qualname__", None) or type(fn).__name__
        cells = getattr(fn, "__closure__", None) or ()
        if "wrapped_custom_getter" in qual and cells and depth < 16:
            for cell in cells:
                try:
                    inner = cell.cell_contents
                except ValueError:   # an empty cell
                    continue
                if callable(inner):
                    walk(inner, depth + 1)
            return
        found.append(qual)

    walk(getter)
    return " then ".join(found) if found else repr(getter)


class _OpName:
    """``v.op`` of a :class:`TF1VariableView`: what TF1 code reads of a variable's op (its name)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"<op {self.name}>"


class TF1VariableView:
    """A layer's variable as a TF1 custom getter sees it: the variable under its TF1 name.

    TF ops take it as the variable (``tf.stop_gradient(v)``, ``v * 2``, ``tf.abs(v)``: a read of
    the variable, so gradients reach it); ``name`` / ``op.name`` are the TF1 names (``'conv0/W:0'``,
    ``'conv0/W'``); other attributes are the variable's (``shape``, ``trainable``, ``assign``, ...).

    Example::

        def binarize(getter, *args, **kwargs):
            v = getter(*args, **kwargs)            # a TF1VariableView
            return tf.sign(v) if v.op.name.endswith('W') else v
    """

    def __init__(self, variable, name: str):
        object.__setattr__(self, "variable", variable)
        object.__setattr__(self, "_tf1_name", name)
        # read once, now: the getter runs right before the layer, so this is the value the layer
        # would read. Read inside a getter's own tf.custom_gradient function, an eager read of the
        # variable would make TF ask that function for the variable's gradient as well.
        object.__setattr__(self, "_read", tf.convert_to_tensor(variable))

    @property
    def name(self) -> str:
        return self._tf1_name + ":0"

    @property
    def op(self) -> _OpName:
        return _OpName(self._tf1_name)

    @property
    def shape(self) -> tf.TensorShape:
        return tf.TensorShape(self.variable.shape)

    @property
    def dtype(self) -> tf.DType:
        return tf.as_dtype(self.variable.dtype)

    def get_shape(self) -> tf.TensorShape:
        return self.shape

    def value(self):
        return tf.convert_to_tensor(self)

    def read_value(self):
        return tf.convert_to_tensor(self)

    def __tf_tensor__(self, dtype=None, name=None):
        return tf.convert_to_tensor(self._read, dtype=dtype, name=name)

    def __array__(self, dtype=None):
        array = self.variable.numpy()
        return array if dtype is None else array.astype(dtype)

    def __getattr__(self, attr):
        return getattr(self.variable, attr)

    def __setattr__(self, attr, value):
        raise AttributeError(f"{self.name}: a custom getter's view of a variable is read-only ({attr!r}).")

    def __repr__(self) -> str:
        return f"<TF1VariableView '{self.name}' shape={self.shape} dtype={self.dtype.name}>"


def _tensor_operator(op: str):
    def apply(self, *args):
        return getattr(tf.convert_to_tensor(self), op)(*args)
    apply.__name__ = op
    return apply


for _op in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
            "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__", "__rpow__",
            "__matmul__", "__rmatmul__", "__neg__", "__abs__", "__getitem__", "__lt__", "__le__", "__gt__",
            "__ge__"):
    setattr(TF1VariableView, _op, _tensor_operator(_op))
del _op


_AGGREGATION = {"none": tf.VariableAggregation.NONE, "sum": tf.VariableAggregation.SUM,
                "mean": tf.VariableAggregation.MEAN,
                "only_first_replica": tf.VariableAggregation.ONLY_FIRST_REPLICA}
_SYNCHRONIZATION = {"auto": tf.VariableSynchronization.AUTO, "none": tf.VariableSynchronization.NONE,
                    "on_read": tf.VariableSynchronization.ON_READ, "on_write": tf.VariableSynchronization.ON_WRITE}


def _takes_constraint(fn) -> bool:
    # TF1 passes `constraint` only to a getter that names it or takes **kwargs
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == "constraint" or p.kind is p.VAR_KEYWORD for p in params)


class _GetterCall:
    """One layer's weights through one custom getter: the mapping for one call."""

    def __init__(self, getter: Callable, key: str, created: bool):
        self.getter = getter
        self.key = key
        self.created = created

    def error(self, what: str) -> ValueError:
        return ValueError(f"The custom getter {custom_getter_names(self.getter)} of the variable scope around layer "
                          f"'{self.key}' {what}")

    def resolve(self, full: str, var=None, make: Optional[Callable[[bool], object]] = None,
                spec: Optional[tuple] = None) -> Tuple[object, Optional[tf.Tensor]]:
        """Run the getter for the variable named ``full``: ``var``, or one ``make(trainable)`` creates
        with the trainability the getter asks (TF1's order: the getter runs before the creation;
        ``spec`` = (shape, dtype, trainable) as asked). Returns the variable and the tensor to
        compute with, or None when the getter returned the variable itself."""
        if var is not None:
            spec = (tf.TensorShape(var.shape), tf.as_dtype(var.dtype), bool(var.trainable))
        want_shape, want_dtype, want_trainable = spec
        got = {}

        def true_getter(name=None, shape=None, dtype=None, initializer=None, regularizer=None, reuse=None,
                        trainable=None, collections=None, caching_device=None, partitioner=None,
                        validate_shape=True, use_resource=None, constraint=None, synchronization=None,
                        aggregation=None, **unknown):
            name = (name or full).split(":")[0]
            if name != full:
                raise self.error(f"asked for the variable '{name}' where the layer reads '{full}'. A getter that "
                                 "renames or adds variables cannot give a Keras layer other weights: keep the name "
                                 "it was given, and create extra variables with tf.compat.v1.get_variable.")
            if shape is not None and not tf.TensorShape(shape).is_compatible_with(want_shape):
                raise self.error(f"asked for '{full}' with shape {tf.TensorShape(shape)}; the layer's variable has "
                                 f"shape {want_shape}.")
            v = got.get("var", var)
            if v is None:
                v = make(want_trainable if trainable is None else bool(trainable))
            elif trainable is False and v.trainable and self.created:
                v.trainable = False   # TF1 created it outside TRAINABLE_VARIABLES: not trained
            got["var"] = v
            return TF1VariableView(v, full)

        kwargs = dict(getter=true_getter, name=full, shape=want_shape, dtype=want_dtype, initializer=None,
                      regularizer=None, reuse=tf.compat.v1.get_variable_scope().reuse,
                      trainable=want_trainable, collections=None, caching_device=None, partitioner=None,
                      validate_shape=True, use_resource=True,
                      synchronization=_enum(getattr(var, "synchronization", None), _SYNCHRONIZATION,
                                            tf.VariableSynchronization.AUTO),
                      aggregation=_enum(getattr(var, "aggregation", None), _AGGREGATION, tf.VariableAggregation.NONE))
        if _takes_constraint(self.getter):
            kwargs["constraint"] = getattr(var, "constraint", None)
        try:
            out = self.getter(**kwargs)
        except Exception as e:
            e.add_note(f"(raised by the custom getter {custom_getter_names(self.getter)} for variable '{full}' "
                       f"of layer '{self.key}')")
            raise
        var = got.get("var", var)
        if var is None:   # the getter never asked for the variable: made as asked, unused here
            var = make(want_trainable)
        if out is None:
            raise self.error(f"returned None for '{full}': a getter returns the variable (getter(...)) or a tensor "
                             "computed from it.")
        if out is var or (isinstance(out, TF1VariableView) and out.variable is var):
            return var, None
        if isinstance(out, tf.Variable) and out is tf_variable_of(var):
            return var, None
        tensor = tf.convert_to_tensor(out)
        if not tensor.shape.is_compatible_with(want_shape):
            raise self.error(f"returned shape {tensor.shape} for '{full}' of shape {want_shape}: the layer computes "
                             "with what the getter returns, which must have the variable's shape.")
        if tensor.dtype.base_dtype != want_dtype.base_dtype:
            raise self.error(f"returned {tensor.dtype.name} for '{full}' ({want_dtype.name}): return the "
                             "variable's dtype (cast back after a transform in another dtype).")
        return var, tensor


def _enum(value, names: dict, default):
    """A Keras variable's aggregation / synchronization (a string) or a tf.Variable's (an enum) as TF's enum."""
    if isinstance(value, (tf.VariableAggregation, tf.VariableSynchronization)):
        return value
    return names.get(str(value), default)


class _WeightsFromGetter(keras.StatelessScope):
    """During one layer call: each mapped Keras variable reads as the getter's tensor.

    Assignments the layer makes (BatchNorm's moving statistics, a seed generator's state) are
    recorded by the scope and made on the variables when it exits; losses the layer adds
    (activity regularizers) are handed back to the layer. Variables it does not map read as they
    are (or as an enclosing stateless scope has them).
    """

    def __init__(self, mapping: List[Tuple[object, tf.Tensor]]):
        super().__init__(state_mapping=mapping, collect_losses=True, initialize_variables=True)
        self.updates: Dict[int, tuple] = {}

    def add_update(self, update):
        variable, value = update
        self.updates[id(variable)] = (variable, value)
        super().add_update(update)

    def get_current_value(self, variable):
        value = super().get_current_value(variable)
        if value is None and self.original_scope is not None:
            return self.original_scope.get_current_value(variable)
        return value

    def hand_back(self, layer) -> None:
        """After exit: make the recorded assignments and give the collected losses to ``layer``."""
        for variable, value in self.updates.values():
            variable.assign(value)
        if self.losses and hasattr(layer, "add_loss"):
            layer.add_loss(list(self.losses))


def _shapes(args):
    return tf.nest.map_structure(lambda x: tuple(tf.convert_to_tensor(x).shape.as_list()), args)


class GetterBoundLayer:
    """A Keras layer whose calls read every weight through a custom getter (what
    :func:`through_custom_getters` returns inside a getter scope). Attributes are the layer's.

    Example::

        layer = through_custom_getters(keras_dense, 'fc', store)
        y = layer(x)          # kernel and bias read through the variable scope's getter
    """

    def __init__(self, layer, key: str, store, getter: Callable):
        object.__setattr__(self, "layer", layer)
        object.__setattr__(self, "_key", key)
        object.__setattr__(self, "_store", store)
        object.__setattr__(self, "_getter", getter)

    def __call__(self, *args, **kwargs):
        layer, key = self.layer, self._key
        call = _GetterCall(self._getter, key, created=not layer.built)
        if not layer.built:
            # the weights must exist before the call to go through the getter: build them from the input
            if not args:
                raise call.error(f"cannot reach the weights of {type(layer).__name__} '{key}' called without a "
                                 "positional input (its weights are made from the input's shape).")
            try:
                layer.build(_shapes(args[0]))
            except (TypeError, ValueError) as e:
                raise call.error(f"cannot reach the weights of {type(layer).__name__} '{key}': building it from "
                                 f"the input shape {_shapes(args[0])} before the call failed ({e}). Build the layer "
                                 "before the getter scope, or call it outside the scope.") from e
        mapping = []
        for rel, var in self._store.variables_of(key).items():
            _, value = call.resolve(f"{key}/{rel}", var)
            if value is not None:
                mapping.append((var, value))
        if not mapping:
            return layer(*args, **kwargs)
        scope = _WeightsFromGetter(mapping)
        with scope:
            out = layer(*args, **kwargs)
        scope.hand_back(layer)
        return out

    def __getattr__(self, attr):
        return getattr(self.layer, attr)

    def __setattr__(self, attr, value):
        setattr(self.layer, attr, value)

    def __repr__(self) -> str:
        return f"<{type(self.layer).__name__} '{self._key}' through custom getter {custom_getter_names(self._getter)}>"


def variable_through_custom_getter(name: str, make: Callable[[bool], object], shape, dtype, trainable: bool,
                                   exists: bool):
    """What kerastrainer's ``get_variable`` returns for the variable ``name``: the variable
    ``make(trainable)`` creates or finds, or inside a custom getter's scope what the getter returns
    for it, as TF1's ``tf.get_variable`` did (the getter runs first; a ``trainable=False`` it asks
    applies when the variable is created, ``exists`` False)."""
    getter = active_custom_getter()
    if getter is None:
        return make(trainable)
    key = name.rsplit("/", 1)[0] if "/" in name else name
    var, value = _GetterCall(getter, key, created=not exists).resolve(
        name, make=make, spec=(tf.TensorShape(shape), tf.as_dtype(dtype), bool(trainable)))
    return var if value is None else value


def through_custom_getters(layer, key: str, store):
    """``layer``, or inside a variable scope with a custom getter, the layer bound to that getter:
    its calls read each weight (named ``<key>/<name in the store>``) through the getter.

    ``store`` is the :class:`~kerastrainer.tfutils.layer_store.LayerStore` holding ``layer`` under
    ``key`` (it gives the weights their TF1 names, ``conv0/W``).
    """
    getter = active_custom_getter()
    if getter is None or not isinstance(layer, keras.layers.Layer):
        return layer
    return GetterBoundLayer(layer, key, store, getter)
