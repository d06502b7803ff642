"""``argscope``: default arguments for a group of layers, as in tensorpack.

Inside ``with argscope(Conv2D, use_bias=False):`` every ``Conv2D`` call that does not
pass ``use_bias`` itself gets ``use_bias=False``. Scopes nest; an inner scope
overrides an outer one for the arguments it names.

The scope stack is thread-local: ``tf.distribute.MirroredStrategy`` traces each
replica in its own thread, so enter argscopes inside the tower function.

Example::

    with argscope([Conv2D, Conv2DTranspose], kernel_size=3, activation=BNReLU), \\
            argscope(BatchNorm, momentum=0.99):
        x = Conv2D('conv0', image, 32)
        x = Conv2D('conv1', x, 64, kernel_size=5)   # explicit arguments win
"""
from __future__ import annotations

import functools
import inspect
import threading
from collections import defaultdict
from contextlib import contextmanager
from types import ModuleType
from typing import Callable, Dict, Iterator, Sequence, Union

from ._shape_log import log_layer_shapes_once

__all__ = ["argscope", "get_arg_scope", "enable_argscope_for_function", "enable_argscope_for_module"]

_local = threading.local()


def _scope_stack() -> list:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def get_arg_scope() -> Dict[str, Dict[str, object]]:
    """The defaults in effect here: ``{layer name: {argument: value}}``.

    Missing layers map to an empty dict, so ``get_arg_scope()['Conv2D'].get('data_format')``
    is always safe.

    Example::

        with argscope(Conv2D, data_format='channels_first'):
            assert get_arg_scope()['Conv2D']['data_format'] == 'channels_first'
    """
    stack = _scope_stack()
    if stack:
        return stack[-1]
    return defaultdict(dict)


def _argscope_name(layer) -> str:
    if not getattr(layer, "__argscope_enabled__", False):
        name = getattr(layer, "__name__", repr(layer))
        raise ValueError(
            f"argscope: {name} does not take an argscope. Pass layers registered with "
            "@layer_register (Conv2D, BatchNorm, ...) or functions wrapped by "
            "enable_argscope_for_function().")
    return layer.__name__


def _check_arguments(layer, kwargs: dict) -> dict:
    """Map legacy argument names and check that the layer takes every argument."""
    canon = getattr(layer, "canonical_kwargs", None)
    if canon is not None:
        return canon(kwargs, where="argscope")
    return dict(kwargs)


@contextmanager
def argscope(layers: Union[Callable, Sequence[Callable]], **kwargs) -> Iterator[None]:
    """Set default arguments of ``layers`` (one layer or a list) inside the ``with`` block.

    Raises ValueError for a layer without argscope support and TypeError for an
    argument that a layer does not take.

    Example::

        with argscope(Conv2D, use_bias=False, kernel_size=3):
            x = Conv2D('conv0', x, 64)
    """
    if not isinstance(layers, (list, tuple)):
        layers = [layers]
    new_scope = _copy_scope(get_arg_scope())
    for layer in layers:
        name = _argscope_name(layer)
        new_scope[name].update(_check_arguments(layer, kwargs))
    stack = _scope_stack()
    stack.append(new_scope)
    try:
        yield
    finally:
        # Pop our own entry even if an inner block misbehaved.
        stack.pop()


def _copy_scope(scope) -> defaultdict:
    # Values (initializers, activations) are shared, not copied: only the dicts are new.
    new = defaultdict(dict)
    for k, v in scope.items():
        new[k] = dict(v)
    return new


def enable_argscope_for_function(func: Callable, log_shape: bool = True) -> Callable:
    """Wrap a plain function (e.g. ``tf.nn.conv2d``-style helpers) so that argscope applies.

    Its first argument is the input tensor; argscope defaults fill the keyword
    arguments the call does not give. With ``log_shape``, the input and output
    shapes are logged once per ``name=`` keyword.

    Example::

        dense = enable_argscope_for_function(my_dense)
        with argscope(dense, units=10):
            y = dense(x, name='fc')
    """
    sig = inspect.signature(func)
    has_varkw = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())

    @functools.wraps(func)
    def wrapped(*args, **kw):
        defaults = get_arg_scope().get(func.__name__, {})
        actual = dict(defaults)
        actual.update(kw)
        try:
            bound = sig.bind_partial(*args, **actual)
        except TypeError:
            # A default that duplicates a positional argument: the call wins.
            bound = sig.bind_partial(*args, **kw)
            for k, v in defaults.items():
                if k not in bound.arguments:
                    bound.arguments[k] = v
        out = func(*bound.args, **bound.kwargs)
        name = actual.get("name")
        if log_shape and name and args:
            log_layer_shapes_once(str(name), args[0], out)
        return out

    def canonical_kwargs(kwargs, where="call"):
        if not has_varkw:
            for k in kwargs:
                if k not in sig.parameters:
                    raise TypeError(f"{where}: {func.__name__} has no argument {k!r}. "
                                    f"Its arguments are: {', '.join(sig.parameters)}.")
        return dict(kwargs)

    wrapped.__argscope_enabled__ = True
    wrapped.canonical_kwargs = canonical_kwargs
    return wrapped


def enable_argscope_for_module(module: ModuleType, log_shape: bool = True) -> None:
    """Replace every public function of ``module`` by its argscope-enabled version.

    Example::

        import mylayers
        enable_argscope_for_module(mylayers)
        with argscope(mylayers.dense, use_bias=False):
            ...
    """
    if not isinstance(module, ModuleType):
        raise TypeError(f"enable_argscope_for_module takes a module, got {type(module).__name__}.")
    for name, obj in list(vars(module).items()):
        if name.startswith("_") or not inspect.isfunction(obj):
            continue
        if getattr(obj, "__argscope_enabled__", False):
            continue
        setattr(module, name, enable_argscope_for_function(obj, log_shape=log_shape))
