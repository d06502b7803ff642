"""Moving tensors to host memory and back: the swap ops and the backward-graph rewrite.

In graph mode (inside ``tf.function``, where the trainers run), the backward ops of
an offloaded block read its saved forward tensors through a pair of copies: a
*swap-out* (``Identity`` placed on the host device, it runs as soon as the tensor
exists) and a *swap-in* (``Identity`` on the tensor's own device, held back by a
control dependency on a *trigger*: the incoming gradient of a later block, so the
copy back starts when the backward pass gets near). Grappler would fold most of
these ``Identity`` ops away, so both carry grappler's ``_grappler_do_not_remove``
mark; the tests check that the copies are in the partitioned graph that runs.

With TFLMS's knobs the schedule is TFLMS's, in topological levels of the graph
(:class:`LevelSchedule`, levels from ``topo.py``): a tensor is swapped for the readers
more than ``swapout_threshold`` levels after its producer, readers within
``swapin_groupby`` levels of each other share a swap-in, and each swap-in waits for an
ancestor of its first reader ``swapin_ahead`` levels before it (:func:`swap_tensor`,
also used by the TF1 graph edit, ``graph_edit.py``).

Example (what :func:`rewire_backward` does for one tensor)::

    host = swap_out(t, '/cpu:0')
    back = swap_in(host, t.device, triggers=[dy])
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import tensorflow as tf

from .._internals import keep_op_in_graph, replace_op_input
from .topo import Levels, find_trigger, group_by_level

__all__ = ["keep_in_graph", "swap_out", "swap_in", "same_device", "compute_device", "rewire_backward",
           "tensor_bytes", "SWAP_OUT_NAME", "SWAP_IN_NAME", "LevelSchedule", "SwappedTensor", "swap_tensor",
           "tflms_swappable", "IMMEDIATE_TYPES"]

SWAP_OUT_NAME = "lms_swapout"
SWAP_IN_NAME = "lms_swapin"

# tensors this small stay where they are: the copy costs more than it frees
MIN_SWAP_BYTES = 4096


def compute_device() -> str:
    """The device that computes when a tensor names none: the first GPU, else the first CPU."""
    if tf.config.list_logical_devices("GPU"):
        return "/device:GPU:0"
    return "/device:CPU:0"


def _canonical(device: str):
    spec = tf.DeviceSpec.from_string(device or compute_device())
    return (spec.job, spec.replica, spec.task, (spec.device_type or "CPU").upper(), spec.device_index or 0)


def same_device(a: str, b: str) -> bool:
    """Whether two device strings name the same device ('' is the compute device)."""
    return _canonical(a) == _canonical(b)


def tensor_bytes(t, batch_size: Optional[int] = None) -> Optional[int]:
    """Bytes of ``t`` from its static shape (unknown dims count as ``batch_size``), or None."""
    shape = t.shape
    if shape.rank is None:
        return None
    n = 1
    for d in shape.as_list():
        if d is None:
            if batch_size is None:
                return None
            d = batch_size
        n *= d
    try:
        return n * tf.as_dtype(t.dtype).size
    except TypeError:
        return None


def keep_in_graph(t: tf.Tensor) -> tf.Tensor:
    """Mark the op of ``t`` so grappler keeps it (graph mode; a no-op eagerly).

    Without the mark grappler folds most ``Identity`` pairs away, device change or not.
    """
    if not tf.executing_eagerly() and hasattr(t, "op"):
        keep_op_in_graph(t.op)
    return t


def swap_out(t: tf.Tensor, host_device: str) -> tf.Tensor:
    """A copy of ``t`` on ``host_device``."""
    with tf.device(host_device):
        return keep_in_graph(tf.identity(t, name=SWAP_OUT_NAME))


def swap_in(t_host: tf.Tensor, device: str, triggers: Sequence[tf.Tensor] = ()) -> tf.Tensor:
    """A copy of ``t_host`` on ``device``, made only after ``triggers`` exist (graph mode)."""
    deps = [t for t in triggers if t is not None]
    with tf.device(device or compute_device()), tf.control_dependencies(deps):
        return keep_in_graph(tf.identity(t_host, name=SWAP_IN_NAME))


def _swappable(t: tf.Tensor) -> bool:
    if t.dtype == tf.resource or t.dtype == tf.variant or not t.dtype.is_floating:
        return False
    if t.op.type in ("Const", "ReadVariableOp", "VarHandleOp"):
        return False
    nbytes = tensor_bytes(t)
    return nbytes is None or nbytes >= MIN_SWAP_BYTES


def _key(t) -> tuple:
    return (t.op.name, t.value_index)


# op types TFLMS never swapped from nor used as a trigger: inputs, constants, variable ops (they
# run at once, or their outputs are no activation); TFLMS did not swap Identity outputs either
IMMEDIATE_TYPES = frozenset({
    "Const", "Placeholder", "PlaceholderWithDefault", "VarHandleOp", "VarIsInitializedOp",
    "VariableShape", "ReadVariableOp", "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp",
    "Variable", "VariableV2", "Assign", "AssignAdd", "AssignSub", "TruncatedNormal", "RandomUniform",
    "Range", "NoOp"})


def tflms_swappable(t: tf.Tensor) -> bool:
    """TFLMS's rule for a candidate tensor: floating point, rank >= 2, not made by an input,
    constant or variable op."""
    return (t.dtype.is_floating and t.shape.rank is not None and t.shape.rank >= 2
            and t.op.type not in IMMEDIATE_TYPES and t.op.type != "Identity"
            and not t.op.name.startswith(("lms/", "lms_")))


@dataclasses.dataclass
class LevelSchedule:
    """TFLMS's swap knobs, in topological levels of ``levels``' graph (see ``topo.py``).

    ``sync_swapin`` (TFLMS's sync_mode 2 or 3): a swap-in waits for the other inputs of its
    first reader instead of an op ``swapin_ahead`` levels before it.
    """
    levels: Levels
    swapout_threshold: int
    swapin_ahead: int
    swapin_groupby: int
    sync_swapin: bool = False

    def far_readers(self, t: tf.Tensor, readers: Iterable) -> List:
        """The ops of ``readers`` more than ``swapout_threshold`` levels after ``t``'s producer."""
        return [op for op in readers if self.levels.distance(t.op, op) > self.swapout_threshold]

    def trigger(self, t: tf.Tensor, first_reader):
        """The op after which the swap-in of ``t`` for ``first_reader`` may run, or None."""
        lowest = self.levels[t.op] + 1
        if self.sync_swapin:
            others = [x.op for x in first_reader.inputs if x is not t and x.op.type not in IMMEDIATE_TYPES
                      and self.levels.get(x.op, -1) >= lowest]
            return sorted(others, key=lambda op: (-self.levels[op], op.name))[0] if others else None
        return find_trigger(first_reader, self.levels, self.swapin_ahead, lowest,
                            allowed=lambda op: op.type not in IMMEDIATE_TYPES)


@dataclasses.dataclass
class SwappedTensor:
    """One tensor moved by :func:`swap_tensor`: its swap-out, and per group of readers a swap-in
    with the readers and the trigger op (None: the swap-in runs as soon as it can)."""
    tensor: tf.Tensor
    swap_out: tf.Tensor
    swap_ins: List[Tuple[tf.Tensor, List, Optional[object]]]


def swap_tensor(t: tf.Tensor, readers: Sequence, host_device: str, schedule: LevelSchedule) -> SwappedTensor:
    """Make ``readers`` (ops) read ``t`` through host memory, on TFLMS's schedule.

    One swap-out on ``host_device``; the readers grouped by ``swapin_groupby``; per group a
    swap-in on the first reader's device (``t``'s, or the compute device, when it names none),
    after the group's trigger (:meth:`LevelSchedule.trigger`). Graph mode only.
    """
    with tf.name_scope(t.op.name.replace(":", "_") + "_" + str(t.value_index)):
        out = swap_out(t, host_device)
    swap_ins = []
    for group in group_by_level(readers, schedule.levels, schedule.swapin_groupby):
        trigger = schedule.trigger(t, group[0])
        device = group[0].device or t.device or compute_device()
        with tf.name_scope(t.op.name.replace(":", "_") + "_" + str(t.value_index)):
            back = swap_in(out, device, [trigger] if trigger is not None else [])
        for op in group:
            for i, x in enumerate(list(op.inputs)):
                if x is t:
                    replace_op_input(op, i, back)
        swap_ins.append((back, group, trigger))
    return SwappedTensor(t, out, swap_ins)


def rewire_backward(forward_ops: Iterable, inputs: Sequence[tf.Tensor], backward_ops: Sequence,
                    host_device: str, triggers: Sequence[tf.Tensor],
                    tensor_filter: Optional[Callable] = None,
                    schedule: Optional[LevelSchedule] = None) -> List[tf.Tensor]:
    """Make ``backward_ops`` read the forward tensors they save through host memory.

    Every input of a backward op that is an output of ``forward_ops`` or one of the
    block's ``inputs`` (floating point, not a variable read, not tiny) is replaced by
    ``swap_in(swap_out(t))``; one pair per tensor, shared by all its backward
    readers. ``tensor_filter(t, backward_op)`` (TFLMS's op-type knobs) may refuse a
    tensor for a reader. Returns the tensors that were swapped.

    With a ``schedule`` (TFLMS's knobs, in levels) the choice is TFLMS's instead: a tensor
    (:func:`tflms_swappable`) is swapped for the readers more than ``swapout_threshold``
    levels after it, with :func:`swap_tensor`'s swap-ins (``triggers`` is not used).
    """
    fwd = set(forward_ops)
    input_keys = {_key(t) for t in inputs}
    if schedule is not None:
        return _rewire_by_levels(fwd, input_keys, backward_ops, host_device, tensor_filter, schedule)
    pairs: Dict[tuple, tf.Tensor] = {}
    swapped: List[tf.Tensor] = []
    bwd = list(backward_ops)
    for op in bwd:
        for i, t in enumerate(list(op.inputs)):
            if not (t.op in fwd or _key(t) in input_keys) or not _swappable(t):
                continue
            if tensor_filter is not None and not tensor_filter(t, op):
                continue
            device = t.device or compute_device()
            if same_device(device, host_device):
                continue
            back = pairs.get(_key(t))
            if back is None:
                back = swap_in(swap_out(t, host_device), device, triggers)
                pairs[_key(t)] = back
                swapped.append(t)
            replace_op_input(op, i, back)
    return swapped


def _rewire_by_levels(fwd, input_keys, backward_ops, host_device, tensor_filter, schedule) -> List[tf.Tensor]:
    schedule.levels.update()
    readers: Dict[tuple, list] = {}
    tensors: Dict[tuple, tf.Tensor] = {}
    for op in backward_ops:
        for t in op.inputs:
            if (t.op in fwd or _key(t) in input_keys) and tflms_swappable(t) and \
                    (tensor_filter is None or tensor_filter(t, op)):
                tensors[_key(t)] = t
                readers.setdefault(_key(t), []).append(op)
    swapped = []
    for k, t in tensors.items():
        if same_device(t.device or compute_device(), host_device):
            continue  # already on the host device
        far = schedule.far_readers(t, readers[k])
        if far:
            swap_tensor(t, far, host_device, schedule)
            swapped.append(t)
    return swapped
