"""IBM TFLMS's knobs, read onto :class:`~kerastrainer.lms.LMS`'s blocks.

TFLMS rewrote a TF1 graph op by op: ``LMS.run(graph)`` does that here too
(``graph_edit.py``); as a callback LMS works on blocks (``lms_block`` s of a tower
function, sub-layers of a Keras model), its swap knobs still measured in levels of the
traced step's ops when given TFLMS's way (no ``policy``). :class:`~kerastrainer.lms.LMS` takes every
constructor argument and property TFLMS had (its 2018 ``lms`` module, the
PowerAI ``tensorflow_large_model_support`` module and its ``LMSKerasCallback``)
and says what each becomes here; a knob with no TF2 meaning is accepted and
logged as a warning naming it. docs/migration-keras2-tflms.md has the table.

Example::

    warn_unsupported({'serialization': ['1:3']})
    # -> "LMS: TFLMS's serialization=['1:3'] has no TF2 equivalent and is ignored: ..."
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, Set

from ..utils import logger

__all__ = ["TFLMS_UNSUPPORTED", "TFLMS_ACCEPTED", "run_error_message", "as_name_set",
           "warn_unsupported", "check_known"]

# knob -> (TFLMS default, why TF2/LMS has no equivalent)
TFLMS_UNSUPPORTED: Dict[str, tuple] = {
    "serialization": ([], "it serialized ops of one topological level of a TF1 graph; TF2's executor "
                          "orders the ops of a tf.function itself"),
    "serialization_by_size": (0, "it serialized ops of one topological level of a TF1 graph; TF2's "
                                 "executor orders the ops of a tf.function itself"),
    "gpu_device": (None, "one LMS acts on every replica's tower (each keeps its tensors on its own "
                         "device); there is no per-GPU instance to make"),
    "ub": (10000, "the swap-in of a block starts exactly swapin_ahead (lb) blocks ahead; there is no "
                  "upper bound to search"),
    "fuse_swapins": (False, "each tensor gets its own copy back; group blocks with swapin_groupby"),
    "ctrld_strategy": ("chain_rule", "the swap-in trigger is the incoming gradient of a later block, "
                                     "found by block order"),
    "swap_branches": (False, "forward-pass branches are not swapped; only what a block's backward "
                             "pass reads"),
    "branch_threshold": (0, "forward-pass branches are not swapped; only what a block's backward "
                            "pass reads"),
    "autotune_plot": (False, "'auto' logs its plan (budget, estimates, the mode of each block) instead "
                             "of a histogram file"),
}

# knobs that need no work in TF2: accepted, logged at info level
TFLMS_ACCEPTED: Dict[str, tuple] = {
    "graph": (None, "run() edits it (TFLMS 2018's LMS(graph=g).run()); as a callback LMS acts on the "
                    "model it is applied to"),
    "optimizer_scopes": (None, "run(graph) finds the backward pass under these scopes; as a callback "
                               "the backward pass is found by tf.custom_gradient"),
    "optimizer_scopes_override": (None, "run(graph) finds the backward pass under these scopes; as a "
                                        "callback the backward pass is found by tf.custom_gradient"),
}


def as_name_set(value, what: str) -> Set[str]:
    """A set of names from a str, or any iterable of str (TFLMS took Python sets)."""
    if value is None:
        return set()
    if isinstance(value, (str, bytes)):
        return {value.decode() if isinstance(value, bytes) else value}
    try:
        items = list(value)
    except TypeError:
        raise TypeError(f"LMS {what} must be a set of names (str); got {type(value).__name__}.") from None
    bad = [v for v in items if not isinstance(v, str)]
    if bad:
        raise TypeError(f"LMS {what} must contain names (str); got {bad[:3]}.")
    return set(items)


def warn_unsupported(knobs: Dict[str, Any]) -> None:
    """Log each knob of ``knobs`` TF2 has no use for: a warning when it differs from TFLMS's default."""
    for name, value in knobs.items():
        if name in TFLMS_UNSUPPORTED:
            default, why = TFLMS_UNSUPPORTED[name]
            if value != default:
                logger.warning("LMS: TFLMS's %s=%r has no TF2 equivalent and is ignored: %s.", name, value, why)
        elif name in TFLMS_ACCEPTED:
            default, why = TFLMS_ACCEPTED[name]
            if value is not None:
                logger.info("LMS: TFLMS's %s is accepted: %s.", name, why)


def check_known(kwargs: Iterable[str], known: Iterable[str]) -> None:
    unknown = sorted(set(kwargs) - set(TFLMS_UNSUPPORTED) - set(TFLMS_ACCEPTED) - set(known))
    if unknown:
        raise TypeError(f"LMS got unknown argument(s) {unknown}. It takes its own arguments (policy, blocks, "
                        "excl_blocks, host_device, memory_budget, batch_size) and TFLMS's "
                        f"({', '.join(sorted(set(known) | set(TFLMS_UNSUPPORTED) | set(TFLMS_ACCEPTED)))}).")


def run_error_message(what: str, why: str = "TF runs eagerly here, so there is no TF1 graph to edit") -> str:
    """The error of TFLMS's TF1 entry points where they cannot act: the graph form and the TF2 calls."""
    return (f"LMS.{what}: {why}. Either give the graph the model was built in: "
            "`with tf.Graph().as_default(): ...build, opt.minimize(loss)...; "
            "lms.run(tf.compat.v1.get_default_graph())`, then a tf.compat.v1.Session; or give the LMS to "
            "the training, before its first step:\n"
            "    keras_model.fit(x, y, callbacks=[lms])                   # Keras (LMSKerasCallback is LMS)\n"
            "    TrainConfig(model=..., dataflow=..., callbacks=[lms])    # kerastrainer trainers\n"
            "    lms.apply(model_or_keras_model)                          # your own tf.function step\n"
            "In a tower function, make each part LMS may swap a block: "
            "`with tf.name_scope('conv1'): y = f(x)` becomes `y = lms_block('conv1', f)(x)`; "
            "excl_scopes / excl_output_by_scopes then name blocks. See docs/migration-keras2-tflms.md (TFLMS).")
