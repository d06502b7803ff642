"""What tensorpack's custom trainers' TF1 graph code needs of TF and Keras internals: a default
session for ``op.run()`` / ``tensor.eval()``, ``v.op.name`` of a variable made eagerly, and a
Keras optimizer answering TF1's ``minimize`` / ``apply_gradients`` for a block.

The TF1 graph itself is ``train/tf1_graph.py``'s; TF's runtime and TF1 variable store are
``tf_runtime.py``'s.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable

from .versions import check_versions

__all__ = ["tf1_default_session", "give_tf1_op_name", "keras_optimizer_tf1_methods"]


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
