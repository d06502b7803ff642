"""Variables of layers made anew in every call of a tower function: created once, then replayed.

A TF1 program ported to TF2 often makes its Keras layers inside ``build_graph``
(``keras.layers.Dense(10, name='fc1')(x)``): TF1 built the graph once, but a tower function is
traced several times (the build, the train step, each replica, predictors), and
``tf.function`` refuses a variable created after its first trace ("tf.function only supports
singleton tf.Variables created on the first call"). :class:`VariableReplay` records the variables
that the first call of the tower creates and hands the same ones back, in order, to the
layers that later calls create: every trace and every replica then shares one set of
variables, as TF1's graph did. Functional layers and ``tfv1.get_variable`` do not get here
(the layer store keeps them by name).

Matching: a later creation gets the recorded variable of the same name, else the next unused
one of the same name with Keras's automatic numbering removed (``dense_7/kernel`` ~
``dense_2/kernel``) and the same shape and dtype; a creation with no such match is an error
naming it. Keras layers kept by the model object are made once and never replayed.

Example::

    replay = VariableReplay()
    with replay.scope():      # first call: records
        keras.layers.Dense(3, name='fc')(x)
    with replay.scope():      # later calls: the same kernel and bias
        keras.layers.Dense(3, name='fc')(x)
"""
from __future__ import annotations

import re
import threading
from contextlib import contextmanager
from typing import Dict, Iterator, List, Optional

import tensorflow as tf

from .tower import current_scope_name

__all__ = ["VariableReplay", "normalized_variable_name", "is_tf1_variable_call"]

_AUTO_NUMBER = re.compile(r"_\d+$")


def _plain_name(name: Optional[str]) -> str:
    name = (name or "Variable").split(":")[0]
    return re.sub(r"^(.*/)?tower\d+/", "", name)


def _name_in_tower(kwargs) -> str:
    """The variable's name under the tower's scope (no tower prefix, no loop or function scopes)."""
    name = _plain_name(kwargs.get("name"))
    scope = current_scope_name()
    return f"{scope}/{name}" if scope and not name.startswith(scope + "/") else name


def normalized_variable_name(name: str) -> str:
    """``'tower0/dense_7/kernel:0'`` -> ``'dense/kernel'``: the name without Keras's automatic numbers."""
    return "/".join(_AUTO_NUMBER.sub("", part) for part in _plain_name(name).split("/"))


def is_tf1_variable_call(kwargs) -> bool:
    """Whether a variable creator got ``tf.compat.v1.get_variable`` / ``VariableV1``'s call (they pass
    TF1-only arguments; Keras and ``tf.Variable`` do not): the layer store keeps those by name."""
    return "collections" in kwargs or "use_resource" in kwargs


def _spec(kwargs):
    shape = kwargs.get("shape")
    dtype = kwargs.get("dtype")
    return (tf.TensorShape(shape) if shape is not None else None,
            tf.as_dtype(dtype).base_dtype if dtype is not None else None)


class VariableReplay:
    """The variables the first call of a tower function created, handed back to later calls."""

    def __init__(self):
        self._recorded: Optional[List[tuple]] = None   # (name in the tower, variable)
        self._lock = threading.Lock()

    @property
    def recorded(self) -> List[tf.Variable]:
        return [v for _, v in self._recorded or []]

    @contextmanager
    def scope(self) -> Iterator[bool]:
        """Enter around one call of the tower: the first one records, later ones replay. Yields
        whether this call records."""
        with self._lock:
            recording = self._recorded is None
            if recording:
                self._recorded = []
        if recording:
            creator = self._recorder()
        else:
            creator = self._replayer()
        with tf.variable_creator_scope(creator):
            yield recording

    def _recorder(self):
        def record(next_creator, **kwargs):
            name = None if is_tf1_variable_call(kwargs) else _name_in_tower(kwargs)
            var = next_creator(**kwargs)
            if name is not None:
                self._recorded.append((name, var))
            return var
        return record

    def _replayer(self):
        by_name: Dict[str, List[tf.Variable]] = {}
        by_norm: Dict[str, List[tf.Variable]] = {}
        for name, var in self._recorded:
            by_name.setdefault(name, []).append(var)
            by_norm.setdefault(normalized_variable_name(name), []).append(var)
        used = set()   # per call: one recorded variable serves one creation

        def fits(var, shape, dtype) -> bool:
            return ((shape is None or shape.is_compatible_with(var.shape))
                    and (dtype is None or dtype == var.dtype.base_dtype))

        def replay(next_creator, **kwargs):
            if is_tf1_variable_call(kwargs):
                return next_creator(**kwargs)
            full = _name_in_tower(kwargs)
            shape, dtype = _spec(kwargs)
            for candidates in (by_name.get(full, []), by_norm.get(normalized_variable_name(full), [])):
                for var in candidates:
                    if id(var) not in used and fits(var, shape, dtype):
                        used.add(id(var))
                        return var
            raise ValueError(
                f"The tower function created the variable '{full}' (shape {shape}, {dtype.name if dtype else '?'}) "
                "in a later call, and its first call created no such variable. A tower function is called "
                "several times (the build, the train step, each replica, predictors) and must create the same "
                "layers every time: make them unconditionally, or once, in ModelDesc.__init__. Variables of the "
                "first call: " + ", ".join(sorted(by_name)[:20]) + ("" if len(by_name) <= 20 else ", ..."))
        return replay
