"""Moving tensors to host memory and back: the swap ops and the backward-graph rewrite.

In graph mode (inside ``tf.function``, where the trainers run), the backward ops of
an offloaded block read its saved forward tensors through a pair of copies: a
*swap-out* (``Identity`` placed on the host device, it runs as soon as the tensor
exists) and a *swap-in* (``Identity`` on the tensor's own device, held back by a
control dependency on a *trigger*: the incoming gradient of a later block, so the
copy back starts when the backward pass gets near). Grappler would fold most of
these ``Identity`` ops away, so both carry grappler's ``_grappler_do_not_remove``
mark; the tests check that the copies are in the partitioned graph that runs.

Example (what :func:`run_offloaded` does for one tensor)::

    host = swap_out(t, '/cpu:0')
    back = swap_in(host, t.device, triggers=[dy])
"""
from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Optional, Sequence

import tensorflow as tf

from .._internals import keep_op_in_graph, replace_op_input

__all__ = ["keep_in_graph", "swap_out", "swap_in", "same_device", "compute_device", "rewire_backward",
           "tensor_bytes", "SWAP_OUT_NAME", "SWAP_IN_NAME"]

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


def rewire_backward(forward_ops: Iterable, inputs: Sequence[tf.Tensor], backward_ops: Sequence,
                    host_device: str, triggers: Sequence[tf.Tensor],
                    tensor_filter: Optional[Callable] = None) -> List[tf.Tensor]:
    """Make ``backward_ops`` read the forward tensors they save through host memory.

    Every input of a backward op that is an output of ``forward_ops`` or one of the
    block's ``inputs`` (floating point, not a variable read, not tiny) is replaced by
    ``swap_in(swap_out(t))``; one pair per tensor, shared by all its backward
    readers. ``tensor_filter(t, backward_op)`` (TFLMS's op-type knobs) may refuse a
    tensor for a reader. Returns the tensors that were swapped.
    """
    fwd = set(forward_ops)
    input_keys = {_key(t) for t in inputs}
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
