"""Topological levels of a graph's ops, and the searches TFLMS made on them.

IBM TFLMS measured its knobs in levels of a *categorized topological sort*: an op's
level is 0 when it reads nothing, else one more than the highest level among the
ops it reads (data and control inputs). ``swapout_threshold`` is a distance between
a tensor's producer and a consumer, ``swapin_ahead`` how many levels before a
consumer its swap-in starts, ``swapin_groupby`` how close (in levels) the
consumers sharing one swap-in are. This module owns those levels and the three
questions asked of them; both forms of LMS's swapping use it: the TF1 graph edit
(``graph_edit.py``) and an offloaded block of a traced ``tf.function`` step
(``offload.py``).

Example::

    levels = Levels(graph)
    levels.distance(relu.op, relu_grad_op)           # -> 57
    group_by_level(consumers, levels, 2)              # -> [[op_a, op_b], [op_c]]
    find_trigger(relu_grad_op, levels, 3, lowest=levels[relu.op] + 1)
"""
from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Optional

__all__ = ["Levels", "group_by_level", "find_trigger", "TRIGGER_SEARCH_LEVELS"]

# how many levels below `swapin_ahead` the trigger search goes before giving up (TFLMS: 10)
TRIGGER_SEARCH_LEVELS = 10


class Levels:
    """op -> topological level, for the ops of ``graph`` (more are added by :meth:`update`).

    Ops are visited in creation order, which puts an op after the ops it reads; an
    input made later (a while loop's back edge, an input rewired afterwards) counts
    as level 0. Levels of ops already seen are kept, so a graph that grows (a
    backward pass being traced) is updated at the cost of its new ops only.
    """

    def __init__(self, graph=None):
        self._level: Dict = {}
        self._seen = 0
        self.graph = graph
        if graph is not None:
            self.update(graph)

    def update(self, graph=None) -> "Levels":
        graph = graph if graph is not None else self.graph
        self.graph = graph
        ops = graph.get_operations()
        for op in ops[self._seen:]:
            preds = [t.op for t in op.inputs] + list(op.control_inputs)
            self._level[op] = 1 + max((self._level.get(p, -1) for p in preds), default=-1)
        self._seen = len(ops)
        return self

    def __getitem__(self, op) -> int:
        return self._level[op]

    def get(self, op, default: Optional[int] = None) -> Optional[int]:
        return self._level.get(op, default)

    def __contains__(self, op) -> bool:
        return op in self._level

    @property
    def size(self) -> int:
        """The number of levels (TFLMS logged it: "categorized topological sort has N levels")."""
        return 1 + max(self._level.values(), default=-1)

    def distance(self, src, dst) -> int:
        """Levels from op ``src`` to op ``dst`` (TFLMS's topological-sort distance)."""
        return self._level[dst] - self._level[src]


def group_by_level(ops: Iterable, levels: Levels, limit: int) -> List[List]:
    """TFLMS's ``swapin_groupby``: ``ops`` in groups, sorted by level, where consecutive ops of a
    group are at most ``limit`` levels apart; ``limit <= 0``: one op per group."""
    ops = sorted(set(ops), key=lambda op: (levels[op], op.name))
    if limit <= 0:
        return [[op] for op in ops]
    groups: List[List] = []
    for op in ops:
        if groups and levels[op] - levels[groups[-1][-1]] <= limit:
            groups[-1].append(op)
        else:
            groups.append([op])
    return groups


def find_trigger(dest, levels: Levels, ahead: int, lowest: int,
                 allowed: Optional[Callable] = None, search: int = TRIGGER_SEARCH_LEVELS):
    """The op whose completion starts the swap-in that ``dest`` reads: an ancestor of ``dest`` at
    level ``levels[dest] - ahead``, or the nearest level below it (at most ``search`` levels
    further, never below ``lowest``: the swapped tensor's producer level + 1). None if no such op.

    ``allowed(op)``: whether ``op`` may be a trigger (e.g. not a constant or a variable read,
    which run at once). Ties at one level go to the first op by name (the edit is reproducible).
    """
    top = levels[dest] - max(1, ahead)
    bottom = max(lowest, top - search)
    if top < bottom:
        return None
    best = None
    seen = {dest}
    frontier = [dest]
    while frontier:  # ancestors of dest, down to level `bottom`
        nxt = []
        for op in frontier:
            for p in [t.op for t in op.inputs] + list(op.control_inputs):
                lv = levels.get(p)
                if p in seen or lv is None or lv < bottom:
                    continue
                seen.add(p)
                nxt.append(p)
                if lv <= top and (allowed is None or allowed(p)):
                    if best is None or lv > levels[best] or (lv == levels[best] and p.name < best.name):
                        best = p
        frontier = nxt
    return best
