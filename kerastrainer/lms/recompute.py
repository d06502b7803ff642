"""Run one block of a model under an LMS mode: recompute, offload, or both.

:func:`run_block` wraps a block (a function of tensors) in a ``tf.custom_gradient``
of our own: tensor arguments only, every variable the block reads gets its
gradient (Keras 3 variables included: ``custom_gradient`` hands us the
``tf.Variable`` under each one).

- ``'recompute'``: the forward pass keeps only the block's inputs; the backward
  pass runs the block again under a tape, after the block's incoming gradient
  exists (a control dependency, so the executor cannot run the copy early).
  Assignments to non-trainable variables (BatchNorm moving statistics) are
  skipped in that second run: the forward pass already made them. A block that
  draws random numbers (Dropout) cannot be recomputed exactly and is refused.
- ``'offload+recompute'``: as ``'recompute'``, but the kept inputs go to the host
  device and come back ``swapin_ahead`` blocks before the block's backward pass.
- ``'offload'``: nothing is recomputed; every tensor the block's backward pass
  reads is copied to the host and back (:func:`~kerastrainer.lms.offload.rewire_backward`).
  This needs graph mode (``tf.function``); executed eagerly the block runs as is.

Example::

    cfg = BlockConfig(host_device='/cpu:0')
    y = run_block('res2', res_block, (x,), {}, 'recompute', cfg)
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Callable, List, Optional, Sequence

import tensorflow as tf

from .._internals import stop_tape_recording
from ..utils import logger
from . import _state
from .offload import (LevelSchedule, compute_device, keep_in_graph, rewire_backward, same_device, swap_in, swap_out,
                      tflms_swappable)
from .topo import Levels

__all__ = ["BlockConfig", "run_block", "MODES", "LMSBlockError"]

MODES = ("recompute", "offload", "offload+recompute")

# A chained block (see _chained) whose forward makes at most this many floating-point elements
# besides its outputs, per output element, recomputes ungated: grappler then merges its recompute
# with the segment's remade forward, so it costs nothing more (a Dense layer makes 2). A block
# that makes more (a ResNet bottleneck block: 7.5-16) waits for its own gradient, else a whole
# segment's internals would be alive at once (ResNet-50 at 224 px: 58 against 36-45 MB per image).
GATE_CHAINED_ABOVE = 4.0


class LMSBlockError(TypeError):
    """A block that LMS cannot wrap (keyword tensors, no tensor input, non-tensor outputs...)."""


@dataclasses.dataclass
class BlockConfig:
    """Knobs of the swap schedule, in blocks (see :class:`~kerastrainer.lms.LMS`)."""
    host_device: str = "/cpu:0"
    swapin_ahead: int = 1
    swapin_groupby: int = 1
    swapout_threshold: int = 1
    sync_swapin: bool = False              # TFLMS sync_mode 2/3: back only at the block's own backward
    keep_last_in_recompute: bool = False   # 'recompute' honours swapout_threshold too (graph mode)
    tensor_filter: Optional[Callable] = None  # (tensor, backward op or None) -> may it be swapped
    # TFLMS's knobs (no policy given): the three swap knobs are distances in topological levels of
    # the traced step's ops, as in TFLMS, not counts of blocks (see topo.py)
    op_levels: bool = False


_warned_eager_offload = False


def _stop_recording():
    # Eager only: the outer tape must not record the block's inner ops (it would
    # keep their outputs alive, which is what we are trying to avoid).
    return stop_tape_recording()


def _split_args(name: str, args: tuple, kwargs: dict):
    for k, v in kwargs.items():
        if any(isinstance(t, (tf.Tensor, tf.Variable)) for t in tf.nest.flatten(v)):
            raise LMSBlockError(
                f"LMS block '{name}' got the tensor {k!r} as a keyword argument; LMS differentiates "
                "positional tensor arguments only. Pass it positionally, or exclude the block "
                "(excl_blocks).")
    leaves = tf.nest.flatten(args)
    pos = [i for i, t in enumerate(leaves) if isinstance(t, tf.Tensor)]
    if not pos:
        raise LMSBlockError(f"LMS block '{name}' has no tensor argument; nothing to recompute or "
                            "offload. Give it its input tensors as positional arguments.")
    return leaves, pos


def _flat_outputs(name: str, out) -> list:
    flat = tf.nest.flatten(out)
    bad = [type(t).__name__ for t in flat if not isinstance(t, tf.Tensor)]
    if bad or not flat:
        raise LMSBlockError(f"LMS block '{name}' must return a tensor or a structure of tensors; "
                            f"it returned {type(out).__name__} with {bad or 'no'} non-tensor parts.")
    return flat


def _is_float(t) -> bool:
    return t.dtype.is_floating or t.dtype.is_complex


def _triggers(state, rec: dict, cfg: BlockConfig) -> List[tf.Tensor]:
    """The gradients whose arrival starts the swap-in of block ``rec``."""
    if state is None:
        return []
    if cfg.sync_swapin:
        return rec.get("dys") or []
    i, n = rec["index"], len(state.blocks)
    g = max(1, cfg.swapin_groupby)
    j = min(n - 1, (i // g + 1) * g - 1 + max(0, cfg.swapin_ahead))
    for k in range(j, i - 1, -1):  # the nearest later block whose backward has started
        dys = state.blocks[k].get("dys")
        if dys:
            return dys
    return rec.get("dys") or []


def _offloads(state, rec: dict, cfg: BlockConfig) -> bool:
    # the last `swapout_threshold` blocks keep their tensors: their backward comes at once
    if state is None:
        return True
    if cfg.op_levels:
        return rec.get("far", True)
    return rec["index"] < len(state.blocks) - max(0, cfg.swapout_threshold)


def _levels(state, graph) -> Levels:
    """The topological levels of the graph being traced (kept per trace, updated as it grows)."""
    if getattr(state, "levels", None) is None:
        state.levels = Levels(graph)
    return state.levels.update(graph)


def _measure_levels(state, rec: dict, cfg: BlockConfig, graph, fwd_ops, inputs, backward_ops) -> None:
    """TFLMS's knobs: the largest distance, in levels, from a tensor the block saves (an output of
    ``fwd_ops`` or one of its ``inputs``) to a ``backward_ops`` reader (``rec['max_distance']``), and
    whether it is over ``swapout_threshold`` (``rec['far']``)."""
    levels = _levels(state, graph)
    fwd, input_keys = set(fwd_ops), {_key(t) for t in inputs}
    dist = [levels[op] - levels[t.op] for op in backward_ops for t in op.inputs
            if (t.op in fwd or _key(t) in input_keys) and t.op in levels and tflms_swappable(t)
            and (cfg.tensor_filter is None or cfg.tensor_filter(t, op))]
    rec["max_distance"] = max(dist, default=0)
    rec["far"] = rec["max_distance"] > cfg.swapout_threshold


def _check_random(name: str, skipped: Sequence[str], new_ops: Sequence) -> None:
    stateful = sorted({op.type for op in new_ops
                       if op.type.startswith(("Random", "TruncatedNormal", "Multinomial"))})
    if skipped or stateful:
        what = ", ".join(list(skipped) + stateful)
        raise ValueError(
            f"LMS block '{name}' draws random numbers ({what}): recomputing it would draw different "
            "ones and give wrong gradients. Move Dropout and other random ops out of the block, use "
            "policy='offload' for it, or exclude it with excl_blocks.")


def run_block(name: str, fn: Callable, args: tuple, kwargs: dict, mode: str, cfg: BlockConfig,
              reenter: Optional[Callable] = None, report: Optional[Callable] = None):
    """``fn(*args, **kwargs)`` with the memory behaviour of ``mode`` (see the module doc).

    ``reenter()`` returns a context manager that restores, for the recompute pass
    (which runs while the backward pass is built, outside the tower), what the
    block's code needs to find its layers: the tower context and the name scope.
    ``report(trace_state)`` is called once the backward pass of the trace's first
    block is built (graph mode): then every block's decision is known.
    """
    if mode not in MODES:
        raise ValueError(f"Unknown LMS mode {mode!r}; use one of {MODES}.")
    leaves, pos = _split_args(name, args, kwargs)
    xs = [leaves[p] for p in pos]
    out_struct = []

    def call(*ts):
        ls = list(leaves)
        for p, t in zip(pos, ts):
            ls[p] = t
        return fn(*tf.nest.pack_sequence_as(args, ls), **kwargs)

    state = _state.trace_state()
    rec = {"name": name, "mode": mode, "dys": None}
    if state is not None:
        rec["index"] = len(state.blocks)
        state.blocks.append(rec)
    eager = tf.executing_eagerly()
    graph = None if eager else tf.compat.v1.get_default_graph()
    # 'recompute' that may keep the block (the last swapout_threshold blocks): record the
    # forward pass, as 'offload' does, and decide in the backward pass, when the order is known
    record = mode == "offload" or (mode == "recompute" and cfg.keep_last_in_recompute and not eager)

    def backward_inputs(dys):
        """The block's inputs for the backward pass: swapped in, or held until ``dys``."""
        if mode == "offload+recompute" and (eager or _offloads(state, rec, cfg)):
            triggers = _triggers(state, rec, cfg)
            back = []
            for x in xs:
                dev = x.device or compute_device()
                if _is_float(x) and not same_device(dev, cfg.host_device) and \
                        (cfg.tensor_filter is None or eager or cfg.tensor_filter(x, None)):
                    back.append(swap_in(swap_out(x, cfg.host_device), dev, triggers))
                    rec["swapped"] = rec.get("swapped", 0) + 1
                    rec.setdefault("swapped_names", []).append(getattr(x, "name", "?"))
                elif eager:
                    back.append(x)
                else:  # not moved (already on the host device): still wait for the gradient
                    with tf.control_dependencies(dys):
                        back.append(keep_in_graph(tf.identity(x, name="lms_recompute_gate")))
            return back
        if eager:
            return list(xs)
        links = rec.get("links") if _chained(state, rec) else None
        prev_outs = _recompute_outputs(state, rec["index"] - 1, dys) if links else None
        back = []
        for p, x in enumerate(xs):
            if links and p in links:
                x = prev_outs[links[p]]  # not kept: the previous block makes it again
                if rec.get("inner_ratio", 0.0) <= GATE_CHAINED_ABOVE:
                    back.append(x)
                    continue
            # the gate holds the recompute until this block's own gradient exists; grappler must
            # keep it, else the recompute may run during the forward pass
            with tf.control_dependencies(dys):
                back.append(keep_in_graph(tf.identity(x, name="lms_recompute_gate")))
        return back

    def gradients(tape, outs, inputs, variables, dys):
        targets = [o for o in outs if _is_float(o)]
        grads_out = [d if d is not None else tf.zeros_like(o)
                     for o, d in zip(outs, dys) if _is_float(o)]
        sources = [x for x in inputs if _is_float(x)]
        g = tape.gradient(targets, sources + variables, output_gradients=grads_out)
        it = iter(g[:len(sources)])
        g_in = [next(it) if _is_float(x) else None for x in inputs]
        return g_in, list(g[len(sources):])

    if mode == "offload" and eager:
        global _warned_eager_offload
        if not _warned_eager_offload:
            _warned_eager_offload = True
            logger.info("LMS: policy 'offload' rewrites the graph of a tf.function; executed eagerly, "
                        "block '%s' keeps its tensors on the device.", name)

    @tf.custom_gradient
    def block(*ts):
        n0 = 0 if eager else len(graph.get_operations())
        if record:
            with tf.GradientTape() as tape:
                tape.watch([t for t in ts if _is_float(t)])
                out = call(*ts)
        elif eager:
            with _stop_recording():
                out = call(*ts)
        else:
            out = call(*ts)
        flat = _flat_outputs(name, out)
        fwd_ops = [] if eager or not (record or mode == "recompute") else graph.get_operations()[n0:]
        if mode == "recompute":   # only a chained recompute reads it (backward_inputs)
            rec["inner_ratio"] = _inner_ratio(fwd_ops, flat)
        out_struct.append(out)

        def grad(*dys, variables=None):
            try:
                return _grad(*dys, variables=variables)
            finally:
                if report is not None and state is not None and rec.get("index") == 0:
                    report(state)

        def _grad(*dys, variables=None):
            variables = list(variables or [])
            rec["dys"] = [d for d in dys if d is not None]
            if cfg.op_levels and record and not eager and state is not None:
                # TFLMS's knobs: build the plain backward pass, then measure it in levels
                n1 = len(graph.get_operations())
                g_in, g_var = gradients(tape, flat, list(ts), variables, dys)
                bwd_ops = graph.get_operations()[n1:]
                _measure_levels(state, rec, cfg, graph, fwd_ops, ts, bwd_ops)
                if mode == "offload":
                    schedule = LevelSchedule(_levels(state, graph), cfg.swapout_threshold, cfg.swapin_ahead,
                                             cfg.swapin_groupby, cfg.sync_swapin)
                    moved = rewire_backward(fwd_ops, ts, bwd_ops, cfg.host_device, [],
                                            tensor_filter=cfg.tensor_filter, schedule=schedule)
                    rec.update(applied=bool(moved), swapped=len(moved), swapped_names=[t.name for t in moved])
                    return g_in, g_var
                if not rec["far"]:
                    return g_in, g_var
                # far: recomputed below; the backward ops just built are left unused (the function prunes them)
            else:
                applies = _offloads(state, rec, cfg)
                if record and (mode == "offload" or not applies):
                    n1 = 0 if eager else len(graph.get_operations())
                    g_in, g_var = gradients(tape, flat, list(ts), variables, dys)
                    if mode == "offload" and not eager and applies:
                        moved = rewire_backward(fwd_ops, ts, graph.get_operations()[n1:], cfg.host_device,
                                                _triggers(state, rec, cfg), tensor_filter=cfg.tensor_filter)
                        rec["applied"] = True
                        rec["swapped"] = len(moved)
                        rec["swapped_names"] = [t.name for t in moved]
                    return g_in, g_var
            rec["applied"] = True
            inputs = backward_inputs(rec["dys"])
            n1 = 0 if eager else len(graph.get_operations())
            with tf.GradientTape() as rtape:
                rtape.watch([x for x in inputs if _is_float(x)])
                rtape.watch(variables)
                with _state.recomputing() as skipped, \
                        (reenter() if reenter is not None else contextlib.nullcontext()):
                    out2 = call(*inputs)
            _check_random(name, skipped.int_state, [] if eager else graph.get_operations()[n1:])
            return gradients(rtape, tf.nest.flatten(out2), inputs, variables, dys)

        return flat, grad

    if state is not None and mode == "recompute" and not eager:
        # a block fed by the previous recomputed block's output need not keep that input: the
        # backward pass can make it again from the previous block's input (segments of blocks)
        prev = state.blocks[rec["index"] - 1] if rec["index"] > 0 else None
        if prev is not None and prev.get("mode") == "recompute" and prev.get("out_keys"):
            links = {p: prev["out_keys"].index(_key(x)) for p, x in enumerate(xs)
                     if _key(x) in prev["out_keys"]}
            rec["links"] = links or None
        rec.update(call=call, reenter=reenter, backward_inputs=backward_inputs)
    flat_out = block(*xs)
    if state is not None:
        rec["out_keys"] = [_key(t) for t in tf.nest.flatten(flat_out)]
    return tf.nest.pack_sequence_as(out_struct[0], flat_out)


def _elements(t) -> int:
    n = 1
    for d in (t.shape.as_list() if t.shape.rank is not None else [1]):
        n *= d or 1   # an unknown (batch) dimension counts as 1 on both sides of the ratio
    return n


def _inner_ratio(ops, outputs) -> float:
    """Floating-point elements the block makes besides its outputs, per output element."""
    out_keys = {_key(t) for t in outputs}
    inner = sum(_elements(t) for op in ops if op.type not in ("ReadVariableOp", "Const", "Identity")
                for t in op.outputs if _is_float(t) and _key(t) not in out_keys)
    return inner / max(1, sum(_elements(t) for t in outputs))


def _key(t) -> tuple:
    return (t.op.name, t.value_index) if hasattr(t, "op") else (id(t), 0)


def _chained(state, rec: dict) -> bool:
    """Whether block ``rec`` drops its input and gets it from the previous block's recompute.

    Runs of linked blocks are cut into segments of about sqrt(number of blocks): the first
    block of a segment keeps its input; when the segment's last block starts its backward
    pass, the segment's block outputs are made again (forward only, nothing else kept), and
    each block then recomputes its own internals in its backward pass, as an unlinked one.
    """
    if state is None or not rec.get("links"):
        return False
    i, n = rec["index"], len(state.blocks)
    seg = max(2, math.ceil(math.sqrt(n)))
    start = i
    while start > 0 and state.blocks[start].get("links"):
        start -= 1
    return (i - start) % seg != 0


def _recompute_outputs(state, j: int, dys) -> list:
    """The outputs of block ``j`` made again, forward only, once ``dys`` exist (memoized per trace)."""
    prev = state.blocks[j]
    if prev.get("memo") is None:
        graph = tf.compat.v1.get_default_graph()
        inputs = prev["backward_inputs"](dys)
        n1 = len(graph.get_operations())
        reenter = prev.get("reenter")
        with _state.recomputing() as skipped, \
                (reenter() if reenter is not None else contextlib.nullcontext()):
            out = prev["call"](*inputs)
        _check_random(prev["name"], skipped.int_state, graph.get_operations()[n1:])
        prev["memo"] = [tf.stop_gradient(t) for t in tf.nest.flatten(out)]
    return prev["memo"]
