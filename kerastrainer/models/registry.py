"""``layer_register``: turn a function into a tensorpack-style functional layer.

A registered layer is called as ``Layer('name', x, *args, **kwargs)``. The wrapper

- checks the name and the input, and maps tensorpack's legacy argument names,
- fills arguments the call leaves out from the enclosing :func:`argscope`,
- runs the function inside the name scope ``name``: Keras layers it creates
  (through :func:`get_layer_here` or :func:`keras_layer`) are stored in the
  tower's :class:`~kerastrainer.tfutils.layer_store.LayerStore` under the scoped
  name (``'res1/conv0'``) and shared by every tower and every trace,
- logs the input and output shapes the first time that name is built.

Scoping uses ``tf.name_scope``. The layer's own scope is entered by absolute name,
so a layer called twice under the same name shares its weights both eagerly and
inside ``tf.function`` (where TF would otherwise rename the scope ``conv0_1``).

Example::

    @layer_register(log_shape=True)
    def Residual(x, channels):
        y = Conv2D('conv', x, channels, 3, activation=BNReLU)
        return x + y

    out = Residual('res0', image, 3)      # variables 'res0/conv/W', 'res0/conv/bn/gamma'...
"""
from __future__ import annotations

import functools
import inspect
import weakref
from typing import Callable, Dict, Optional

import keras
import numpy as np
import tensorflow as tf

from ..tfutils.custom_getters import through_custom_getters
from ..tfutils.tower import current_layer_store, current_scope_name, layer_scope
from ._shape_log import disable_layer_logging, log_layer_shapes_once
from .arg_scope import get_arg_scope

__all__ = ["layer_register", "keras_layer", "get_keras_layer", "current_layer_store",
           "get_registered_layer", "layer_scope", "disable_layer_logging", "VariableHolder"]

_LAYER_REGISTRY: Dict[str, Callable] = {}


def _scoped(name: str) -> str:
    scope = current_scope_name()
    return f"{scope}/{name}" if scope else name


def keras_layer(name: str, factory: Callable[[], object],
                var_aliases: Optional[Dict[str, str]] = None):
    """The Keras layer stored under ``<current scope>/name``, created by ``factory()`` once.

    Use it to put any Keras layer (or model) inside a tower function: every tower
    and every trace gets the same object, so its variables are shared, saved by the
    layer store's checkpoint, and reported by ``named_variables()`` as
    ``'<scope>/<name>/<variable>'``. ``var_aliases`` renames variables there
    (``{'kernel': 'W'}``). Inside a TF1 custom getter's scope (``remap_variables``,
    ``variable_scope(custom_getter=...)``) it returns the layer bound to the getter: each call
    reads the weights through it, as a registered layer's do.

    Example::

        def build_graph(self, image, label):
            with tf.name_scope('head'):
                dense = keras_layer('fc', lambda: keras.layers.Dense(10))
            logits = dense(features)          # variables 'head/fc/kernel', 'head/fc/bias'
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"keras_layer: the name must be a non-empty string, got {name!r}.")
    if not callable(factory) or isinstance(factory, keras.layers.Layer):
        raise TypeError(f"keras_layer({name!r}, factory): factory must be a callable that returns "
                        f"a new Keras layer (e.g. lambda: keras.layers.Dense(10)), got "
                        f"{type(factory).__name__}.")
    store, key = current_layer_store(), _scoped(name)
    # inside a TF1 custom getter's scope, its calls read the weights through the getter
    return through_custom_getters(store.get_or_create(key, factory, var_aliases), key, store)


get_keras_layer = keras_layer


def get_layer_here(factory: Callable[[str], object], var_aliases: Optional[Dict[str, str]] = None):
    """For layer implementations: the Keras layer of the layer scope we are in.

    ``factory(keras_name)`` makes the layer; ``keras_name`` is the scoped key with
    '/' replaced by '.' (Keras names cannot contain '/').
    """
    key = current_scope_name()
    if not key:
        raise RuntimeError("get_layer_here() must run inside a layer scope (a layer registered "
                           "with use_scope=True, or `with layer_scope(name):`).")
    store = current_layer_store()
    layer = store.get_or_create(key, lambda: factory(key.replace("/", ".")), var_aliases)
    # inside a TF1 custom getter's scope, its calls read the weights through the getter
    return through_custom_getters(layer, key, store)


def _is_tensor_like(x) -> bool:
    return (tf.is_tensor(x) or isinstance(x, (np.ndarray, np.generic, float, int, list, tuple))
            or hasattr(x, "shape") and hasattr(x, "dtype"))


class VariableHolder:
    """The variables of one layer call, by short name: ``out.variables.W`` (tensorpack's holder).

    Every registered layer attaches one to its output tensor, so tensorpack code such as
    ``visualize(Conv2D('conv0', x, 32, 3).variables.W)`` runs. A BatchNorm's ``mean/EMA`` is
    ``.mean``. ``all()`` lists them.

    Example::

        h = VariableHolder(W=kernel, b=bias)
        h.W is kernel; h.all() == [kernel, bias]
    """

    def __init__(self, **variables):
        object.__setattr__(self, "_vars", dict(variables))

    def __setattr__(self, name, var):
        self._vars[name] = var

    def __getattr__(self, name):
        try:
            return self._vars[name]
        except KeyError:
            raise AttributeError(f"This layer has no variable {name!r}; it has "
                                 f"{sorted(self._vars) or 'none'}.") from None

    def all(self) -> list:
        """All held variables."""
        return list(self._vars.values())

    def __repr__(self) -> str:
        return f"VariableHolder({', '.join(sorted(self._vars))})"


class _TensorVariables(VariableHolder):
    """The holder on a layer's output tensor: it refers to the variables weakly. A traced graph
    outlives its training (TensorFlow registers a gradient function per trace, globally, that
    keeps the trace's tensors), and must not keep the model's weights alive with it."""

    def __init__(self, **variables):
        object.__setattr__(self, "_vars", {k: _weak(v) for k, v in variables.items()})

    def __setattr__(self, name, var):
        self._vars[name] = _weak(var)

    def __getattr__(self, name):
        ref = super().__getattr__(name)
        var = ref()
        if var is None:
            raise ReferenceError(f"The variable {name!r} of this layer no longer exists: the model that owned it "
                                 "was freed. Keep a reference to the model (or the trainer) to read it.")
        return var

    def all(self) -> list:
        return [getattr(self, k) for k in self._vars]


def _weak(var):
    try:
        return weakref.ref(var)
    except TypeError:   # an object without weak references: held as it is
        return lambda: var


def _attach_variables(key: str, outputs) -> None:
    """Give the layer's output tensor ``.variables`` (the variables created under ``key``)."""
    if not tf.is_tensor(outputs) or hasattr(outputs, "variables"):
        return
    store = current_layer_store()
    found = {rel.split("/")[0]: v for rel, v in store.variables_of(key).items()}
    prefix = key + "/"
    for name, v in store.raw_variables.items():  # tf.get_variable inside a custom layer
        if name.startswith(prefix) and "/" not in name[len(prefix):]:
            found[name[len(prefix):]] = v
    if found:
        try:
            outputs.variables = _TensorVariables(**found)
        except AttributeError:  # a tensor type that takes no attributes: nothing to attach to
            pass


def legacy_names(**mapping: str):
    """Decorator (under ``@layer_register``): accept tensorpack's old argument names.

    ``@legacy_names(out_channel='filters')`` lets ``Conv2D(..., out_channel=32)`` mean
    ``filters=32``.
    """
    def deco(func):
        func._legacy_names = dict(mapping)
        return func
    return deco


def layer_register(log_shape: bool = True, use_scope: Optional[bool] = True) -> Callable:
    """Register a function as a functional layer.

    Args:
        log_shape: log the input and output shapes the first time the layer is built.
        use_scope: True: called as ``f('name', x, ...)`` and runs in scope ``name``.
            False: called as ``f(x, ...)``, no scope. None: both forms are accepted.

    The decorated function takes the input first: ``def MyLayer(x, channels, ...)``.

    Example::

        @layer_register()
        def Scale(x, init=1.0):
            s = keras_layer('s', lambda: ScaleLayer(init))
            return s(x)

        y = Scale('scale0', x, init=0.5)
        with argscope(Scale, init=2.0):
            z = Scale('scale1', x)
    """
    def wrapper(func: Callable) -> Callable:
        sig = inspect.signature(func)
        params = list(sig.parameters.values())
        varkw = next((p.name for p in params if p.kind is p.VAR_KEYWORD), None)
        legacy = getattr(func, "_legacy_names", {})
        lname = func.__name__

        def canonical_kwargs(kwargs: dict, where: str = "call") -> dict:
            out, given_as = {}, {}
            for k, v in kwargs.items():
                canon = legacy.get(k, k)
                if canon in out:
                    raise TypeError(f"{lname}: got both {given_as[canon]!r} and {k!r} (the same "
                                    "argument); pass only one.")
                given_as[canon] = k
                if canon not in sig.parameters and varkw is None:
                    usable = [p.name for p in params[1:] if p.kind is not p.VAR_POSITIONAL]
                    raise TypeError(f"{where}: {lname} got an unexpected argument {k!r}. "
                                    f"Its arguments are: {', '.join(usable)}.")
                if canon == params[0].name:
                    raise TypeError(f"{where}: {lname} takes its input tensor as an argument "
                                    "after the name, not as a keyword.")
                out[canon] = v
            return out

        def split_name(args):
            if use_scope is True:
                if len(args) < 2:
                    raise TypeError(f"{lname} needs a name and an input: {lname}('name', x, ...); "
                                    f"got {len(args)} positional argument(s).")
                if not isinstance(args[0], str):
                    raise TypeError(f"{lname}: the first argument must be the layer's name (a str), "
                                    f"got {type(args[0]).__name__}. Call it as {lname}('name', x, ...).")
                return args[0], args[1], args[2:]
            if args and isinstance(args[0], str):
                if use_scope is False:
                    raise TypeError(f"{lname} takes no name: call it as {lname}(x, ...).")
                if len(args) < 2:
                    raise TypeError(f"{lname}({args[0]!r}) needs an input tensor after the name.")
                return args[0], args[1], args[2:]
            if not args:
                raise TypeError(f"{lname} needs an input tensor as its first argument.")
            return None, args[0], args[1:]

        def bind(inputs, rest, kwargs):
            call_kwargs = canonical_kwargs(kwargs)
            try:
                bound = sig.bind_partial(inputs, *rest, **call_kwargs)
            except TypeError as e:
                raise TypeError(f"{lname}: {e}. Signature: {lname}{sig}") from None
            for k, v in get_arg_scope().get(lname, {}).items():
                if k in bound.arguments:
                    continue
                if k in sig.parameters:
                    bound.arguments[k] = v
                else:  # accepted through **kwargs
                    bound.arguments.setdefault(varkw, {})[k] = v
            return bound

        @functools.wraps(func)
        def wrapped(*args, **kwargs):
            name, inputs, rest = split_name(args)
            if inputs is None or isinstance(inputs, str) or not _is_tensor_like(inputs):
                raise TypeError(f"{lname}({name!r}, x, ...): x must be a tensor, got "
                                f"{type(inputs).__name__}.")
            bound = bind(inputs, rest, kwargs)
            if name is None:
                return func(*bound.args, **bound.kwargs)
            # tensorpack's layers ran in a TF1 variable scope of their name: `tf.get_variable('W', ...)`
            # in a program's own layer (shufflenet's DepthConv) is '<scope>/<name>/W'
            with layer_scope(name) as key, tf.compat.v1.variable_scope(name, auxiliary_name_scope=False):
                outputs = func(*bound.args, **bound.kwargs)
            _attach_variables(key, outputs)
            if log_shape:
                log_layer_shapes_once(key, inputs, outputs)
            return outputs

        wrapped.symbolic_function = func
        wrapped.use_scope = use_scope
        wrapped.__argscope_enabled__ = True
        wrapped.canonical_kwargs = canonical_kwargs
        old = _LAYER_REGISTRY.get(lname)
        if old is not None and (old.__module__, old.__qualname__) != (func.__module__, func.__qualname__):
            raise ValueError(f"A layer named {lname!r} is already registered (from {old.__module__}). "
                             "Give the new layer another function name.")
        _LAYER_REGISTRY[lname] = wrapped
        return wrapped
    return wrapper


def get_registered_layer(name: str) -> Optional[Callable]:
    """The registered layer called ``name`` (e.g. ``'Conv2D'``), or None."""
    return _LAYER_REGISTRY.get(name)
