"""tensorpack's ``tfutils.dependency``: whether graph targets depend on an op (TF1 graphs and function graphs).

The walk goes backwards from the targets through data inputs and control inputs, as tensorpack's
did; it works on any graph that has operations: a TF1 ``tf.Graph``, a custom trainer's graph, a
traced ``tf.function``'s graph. In eager code there is no graph and nothing to analyse: an eager
tensor is refused with a clear error.

Example::

    train_op = opt.minimize(cost)
    assert dependency_of_targets([train_op], cost)
"""
from __future__ import annotations

from typing import Iterable

import tensorflow as tf

__all__ = ["dependency_of_targets", "dependency_of_fetches"]


def _as_op(x, what: str) -> tf.Operation:
    if isinstance(x, tf.Operation):
        return x
    if isinstance(x, tf.Variable):
        x = x.handle if hasattr(x, "handle") else x
    if tf.is_tensor(x) and hasattr(x, "op") and not hasattr(x, "numpy"):
        return x.op
    raise TypeError(f"{what}: {x!r} is not an operation or a tensor of a graph (eager values have no graph to "
                    "walk; call it on graph tensors: a TF1 graph, a custom trainer's, a traced tf.function's).")


def _backward_ops(targets: Iterable) -> set:
    seen = set()
    stack = [_as_op(t, "dependency_of_targets") for t in targets]
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return seen


def dependency_of_targets(targets, op) -> bool:
    """Whether any of ``targets`` (ops or tensors) depends on ``op`` (an op or a tensor), through data
    or control inputs."""
    if not isinstance(targets, (list, tuple, set)):
        targets = (targets,)
    return _as_op(op, "dependency_of_targets") in _backward_ops(targets)


def _flatten_fetches(fetches) -> list:
    if isinstance(fetches, dict):
        return [x for v in fetches.values() for x in _flatten_fetches(v)]
    if isinstance(fetches, (list, tuple, set)):
        return [x for v in fetches for x in _flatten_fetches(v)]
    return [fetches]


def dependency_of_fetches(fetches, op) -> bool:
    """:func:`dependency_of_targets` of what ``sess.run(fetches)`` would run: a nested structure (lists,
    tuples, dicts) of ops, tensors and their names in ``op``'s graph."""
    op = _as_op(op, "dependency_of_fetches")
    targets = []
    for f in _flatten_fetches(fetches):
        if isinstance(f, str):
            f = op.graph.as_graph_element(f)
        targets.append(f)
    return dependency_of_targets(targets, op)
