"""TFLMS's graph form: ``LMS(...).run(graph)`` edits a ``tf.compat.v1`` graph before a Session runs it.

IBM TFLMS's main form was a TF1 program: build the model and the training op, then
``LMS(swapout_threshold=50, swapin_ahead=3, swapin_groupby=2).run(tf.get_default_graph())``,
then ``Session.run``. TF 2.21 still has that graph (``with tf.Graph().as_default():`` or
``tf.compat.v1.disable_v2_behavior()``); this module edits it as TFLMS did:

1. the backward pass: the ops under the ``gradients`` name scopes that
   ``tf.compat.v1.train.Optimizer.minimize`` and ``tf.gradients`` make (``gradients``,
   ``gradients_1``, ... at any depth), or under TFLMS's ``optimizer_scopes`` when given;
2. the topological levels of every op (``topo.py``);
3. each forward tensor (TFLMS's rule: floating point, rank >= 2, not an input, constant
   or variable op) read by backward ops more than ``swapout_threshold`` levels after its
   producer: a swap-out on the host device, the far readers grouped by ``swapin_groupby``,
   per group a swap-in on the readers' device that waits for an ancestor of the first
   reader ``swapin_ahead`` levels before it (``offload.swap_tensor``);
4. a log of the edit, as TFLMS logged it (levels, knobs, swap-outs and swap-ins added).

TFLMS's op filters keep their graph meaning: ``excl_scopes`` / ``incl_scopes`` and the
``*_output_by_scopes`` / ``*_output_by_types`` properties choose the producers,
``*_input_by_*`` the readers (a scope is a prefix of op names, as in TFLMS),
``starting_scope`` / ``starting_op_names`` the ops from which producers are looked for,
``n_tensors`` how many tensors at most. The -1 knobs (TFLMS's auto-tuning) check whether
the graph fits without LMS and leave it as is when it does; its simulator is not ported,
so a graph that does not fit needs the three knobs.

Example::

    with tf.Graph().as_default():
        ...                                   # placeholders, model, loss, opt.minimize(loss)
        LMS(swapout_threshold=50, swapin_ahead=3, swapin_groupby=2).run(tf.compat.v1.get_default_graph())
        with tf.compat.v1.Session() as sess:
            ...
"""
from __future__ import annotations

import dataclasses
import re
from typing import Iterable, List, Optional, Set

import numpy as np
import tensorflow as tf

from ..utils import logger
from .offload import (SWAP_OUT_NAME, LevelSchedule, SwappedTensor, compute_device, same_device, swap_tensor,
                      tensor_bytes, tflms_swappable)
from .planner import device_memory_budget
from .topo import Levels

__all__ = ["GraphEditReport", "edit_graph", "backward_ops", "BACKWARD_SCOPE"]

# the name scopes of the backward pass that tf.gradients / Optimizer.minimize make
BACKWARD_SCOPE = re.compile(r"(^|/)gradients(_\d+)?/")
LMS_SCOPE = "lms/"


@dataclasses.dataclass
class GraphEditReport:
    """What :func:`edit_graph` did to a graph."""
    ops: int                         # ops before the edit
    levels: int                      # levels of its topological sort
    swapped: List[SwappedTensor]     # one entry per tensor moved
    max_distance: int = 0            # the largest producer -> backward reader distance among candidates

    @property
    def tensors(self) -> List[str]:
        return [s.tensor.name for s in self.swapped]

    @property
    def swap_out_ops(self) -> list:
        return [s.swap_out.op for s in self.swapped]

    @property
    def swap_in_ops(self) -> list:
        return [b.op for s in self.swapped for b, _, _ in s.swap_ins]


def backward_ops(graph: tf.Graph, optimizer_scopes: Iterable[str] = ()) -> Set:
    """The ops of the backward pass: under ``optimizer_scopes`` (TFLMS 2018's knob) when given,
    else under a ``gradients`` name scope (``tf.gradients``, ``Optimizer.minimize``)."""
    scopes = [s.rstrip("/") + "/" for s in optimizer_scopes or ()]
    if scopes:
        return {op for op in graph.get_operations() if op.name.startswith(tuple(scopes))}
    return {op for op in graph.get_operations() if BACKWARD_SCOPE.search(op.name)}


def _by_scopes(ops, scopes: Set[str], what: str) -> Set:
    """Ops whose name starts with one of ``scopes`` (TFLMS's prefix rule); a scope no op is in is an error."""
    found = set()
    for s in sorted(scopes):
        hit = {op for op in ops if op.name.startswith(s)}
        if not hit:
            raise ValueError(f"LMS.run(graph): {what} names the scope {s!r}, but no op of the graph is in it. "
                             "Give name scopes of this graph (op names start with them).")
        found |= hit
    return found


def _by_types(ops, types: Set[str], what: str) -> Set:
    found = {op for op in ops if op.type in types}
    missing = sorted(set(types) - {op.type for op in found})
    if missing:
        raise ValueError(f"LMS.run(graph): {what} names op type(s) {missing} that no op of the graph has.")
    return found


def _descendants(starts: Set, ops) -> Set:
    """``starts`` and every op reached from them (ops in creation order)."""
    reached = set(starts)
    for op in ops:
        if op not in reached and any(t.op in reached for t in op.inputs):
            reached.add(op)
    return reached


def _check_graph(knobs, graph) -> None:
    if not isinstance(graph, tf.Graph):
        raise TypeError(f"LMS.run(graph) needs a tf.Graph (tf.compat.v1.get_default_graph() where the model "
                        f"was built); got {type(graph).__name__}.")
    if knobs.policy in ("recompute", "offload+recompute") and not knobs.policy_from_knobs:
        raise ValueError(f"LMS.run(graph) swaps tensors to the host, as TFLMS did; policy {knobs.policy!r} has no "
                         "graph form. Use LMS(swapout_threshold=..., swapin_ahead=..., swapin_groupby=...).run(graph), "
                         "or give this LMS to the training as a callback.")
    if knobs.blocks is not None or knobs.excl_blocks:
        logger.warning("LMS.run(graph): blocks=%s / excl_blocks=%s name lms_blocks of a tower function and are "
                       "not used by the graph edit; name the graph's scopes with incl_scopes / excl_scopes.",
                       knobs.blocks, knobs.excl_blocks)


def _no_backward_message(graph) -> str:
    hint = ""
    if tf.executing_eagerly() and graph is tf.compat.v1.get_default_graph():
        hint = (" TF2 runs eagerly here, so the default graph is empty: build the model, the loss and "
                "opt.minimize(loss) inside `with tf.Graph().as_default():` (or after "
                "tf.compat.v1.disable_v2_behavior()) and call run(tf.compat.v1.get_default_graph()) there.")
    return ("LMS.run(graph): the graph has no backward pass: no op under a 'gradients' name scope (which "
            "tf.compat.v1.train.Optimizer.minimize and tf.gradients make). Call run(graph) after building the "
            "training op, or name the optimizer's scopes: LMS(..., optimizer_scopes={'adam_optimizer'})." + hint)


def _fits_without_lms(knobs, graph, candidates) -> bool:
    """TFLMS's auto-tuning first step: does the graph fit without LMS? (its simulator is not ported)."""
    batch = knobs.batch_size
    if batch is None and any(op.type in ("Placeholder", "PlaceholderWithDefault") and op.outputs[0].shape.rank
                             and op.outputs[0].shape[0] is None for op in graph.get_operations()):
        raise ValueError("LMS.run(graph) with -1 knobs (TFLMS's auto-tuning) needs the batch size: the graph is "
                         "fed through placeholders of unknown batch. Set lms.batch_size = N (as with TFLMS), or "
                         "give swapout_threshold, swapin_ahead and swapin_groupby.")
    kept = sum(tensor_bytes(t, batch or 1) or 0 for t in candidates)
    weights = 4 * sum(int(np.prod(v.shape.as_list())) * v.dtype.size
                      for v in graph.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)
                      if v.shape.is_fully_defined())
    budget = knobs.memory_budget if knobs.memory_budget is not None else device_memory_budget()
    estimate = kept + weights
    if budget is None or estimate <= budget:
        logger.info("LMS.run(graph): LMS is not necessary (estimated %.1f MiB of activations and weights%s); "
                    "the graph is left as is.", estimate / (1 << 20),
                    "" if budget is None else f" fit the budget of {budget / (1 << 20):.1f} MiB")
        return True
    raise ValueError(f"LMS.run(graph): the graph needs about {estimate / (1 << 20):.1f} MiB, over the budget of "
                     f"{budget / (1 << 20):.1f} MiB, and TFLMS's auto-tuning (its simulator) is not ported: give "
                     "swapout_threshold, swapin_ahead and swapin_groupby, e.g. LMS(swapout_threshold=50, "
                     "swapin_ahead=3, swapin_groupby=2) (distances in topological levels, as in TFLMS).")


def edit_graph(knobs, graph: tf.Graph) -> GraphEditReport:
    """Edit ``graph`` in place for the LMS ``knobs`` (an :class:`~kerastrainer.lms.knobs.LMSKnobs`);
    see the module doc. Returns what was done."""
    _check_graph(knobs, graph)
    ops = graph.get_operations()
    if any(op.name.startswith(LMS_SCOPE) and op.name.endswith(SWAP_OUT_NAME) for op in ops):
        logger.info("LMS.run(graph): this graph already has LMS's swap ops; it is not edited again.")
        return GraphEditReport(len(ops), Levels(graph).size, [])
    opt_scopes = knobs.tflms_knobs.get("optimizer_scopes") or knobs.tflms_knobs.get("optimizer_scopes_override")
    bwd = backward_ops(graph, [opt_scopes] if isinstance(opt_scopes, str) else opt_scopes or ())
    if not bwd:
        raise ValueError(_no_backward_message(graph))
    levels = Levels(graph)
    th, ahead, groupby = (knobs.knobs[k] for k in ("swapout_threshold", "swapin_ahead", "swapin_groupby"))

    # TFLMS's filters: producers (output side) and readers (input side)
    fwd = [op for op in ops if op not in bwd]
    excl_src = _by_scopes(fwd, knobs.excl_scopes | knobs.excl_output_by_scopes, "excl_scopes / excl_output_by_scopes") \
        | _by_types(fwd, knobs.excl_types | knobs.excl_output_by_types, "excl_types / excl_output_by_types")
    incl_names = knobs.incl_scopes | knobs.incl_output_by_scopes
    incl_types = knobs.incl_types | knobs.incl_output_by_types
    incl_src = (_by_scopes(fwd, incl_names, "incl_scopes / incl_output_by_scopes")
                | _by_types(fwd, incl_types, "incl_types / incl_output_by_types")) if incl_names or incl_types else None
    excl_dst = _by_scopes(bwd, knobs.excl_input_by_scopes, "excl_input_by_scopes") \
        | _by_types(bwd, knobs.excl_input_by_types, "excl_input_by_types")
    incl_dst = (_by_scopes(bwd, knobs.incl_input_by_scopes, "incl_input_by_scopes")
                | _by_types(bwd, knobs.incl_input_by_types, "incl_input_by_types")) \
        if knobs.incl_input_by_scopes or knobs.incl_input_by_types else None
    start = set()
    if knobs.starting_scope:
        start |= _by_scopes(fwd, {knobs.starting_scope}, "starting_scope")
    if knobs.starting_op_names:
        start |= {op for op in fwd if op.name in knobs.starting_op_names}
        if not start:
            raise ValueError(f"LMS.run(graph): no op is named as in starting_op_names={sorted(knobs.starting_op_names)}.")
    reachable = _descendants(start, fwd) if start else None

    candidates = []   # (tensor, its far-enough readers), producers in topological order
    max_distance = 0
    for op in sorted(fwd, key=lambda o: levels[o]):
        if op in excl_src or (incl_src is not None and op not in incl_src) or \
                (reachable is not None and op not in reachable):
            continue
        for t in op.outputs:
            if not tflms_swappable(t):
                continue
            readers = [r for r in t.consumers() if r in bwd and r not in excl_dst
                       and (incl_dst is None or r in incl_dst)]
            if readers:
                max_distance = max(max_distance, max(levels.distance(op, r) for r in readers))
                candidates.append((t, readers))
    if min(th, ahead, groupby) < 0 and _fits_without_lms(knobs, graph, [t for t, _ in candidates]):
        return GraphEditReport(len(ops), levels.size, [], max_distance)

    schedule = LevelSchedule(levels, max(0, th), max(0, ahead), groupby, sync_swapin=knobs.sync_mode in (2, 3))
    host = knobs.host_device
    logger.info("LMS.run(graph): editing the graph for LMS: %d ops, %d backward; %d topological levels; "
                "swapout_threshold %d, swapin_ahead %d, swapin_groupby %d (in levels, as TFLMS), sync_mode %d.",
                len(ops), len(bwd), levels.size, th, ahead, groupby, knobs.sync_mode)
    swapped: List[SwappedTensor] = []
    with graph.as_default(), graph.name_scope(LMS_SCOPE):
        for t, readers in candidates:
            if 0 <= knobs.n_tensors <= len(swapped):
                break
            far = schedule.far_readers(t, readers)
            if far:
                swapped.append(swap_tensor(t, far, host, schedule))
    report = GraphEditReport(len(ops), levels.size, swapped, max_distance)
    _log(knobs, report, th, host)
    return report


def _log(knobs, rep: GraphEditReport, threshold: int, host: str) -> None:
    if not rep.swapped:
        logger.warning("LMS.run(graph) selects nothing: no forward tensor is read by the backward pass more than "
                       "swapout_threshold=%d levels after it is made (the largest such distance in this graph is %d "
                       "levels, of %d). Use a swapout_threshold below %d to swap.", threshold, rep.max_distance,
                       rep.levels, rep.max_distance)
        return
    mib = sum(tensor_bytes(s.tensor, knobs.batch_size or 1) or 0 for s in rep.swapped) / (1 << 20)
    logger.info("LMS.run(graph): added %d operations to the graph (%d swap-out operations (%.2f MiB at batch %s) "
                "and %d swap-in operations); %d tensor(s) swapped to %s.", len(rep.swap_out_ops) + len(rep.swap_in_ops),
                len(rep.swap_out_ops), mib, knobs.batch_size or 1, len(rep.swap_in_ops), len(rep.swapped), host)
    if same_device(host, compute_device()):
        logger.warning("LMS.run(graph): host device %s is the compute device (no GPU): the swap ops are in the "
                       "graph as TFLMS would add them, but moving tensors there frees nothing.", host)
    if knobs.debug:
        for s in rep.swapped:
            logger.info("LMS debug: %s -> %d swap-in(s)%s", s.tensor.name, len(s.swap_ins),
                        (": " + "; ".join(f"readers {[r.name for r in g]} after {tr.name if tr is not None else '-'}"
                                          for _, g, tr in s.swap_ins)) if knobs.debug_level >= 2 else "")
