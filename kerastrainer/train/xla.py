"""The XLA policy of a trainer: whether a run uses XLA, over which region of the step, and
what happens when XLA cannot compile it. One object, :class:`XlaPolicy`, owned by the trainer.

It owns: the decision (``jit_compile`` True / False / ``'auto'``: on where the replicas run on
GPUs), the region (``'step'``: forward, backward and update in one cluster, for one replica
without an all-reduce in the update; ``'forward_backward'`` otherwise), what a failure to
compile means (fall back without XLA under ``'auto'``, raise under ``True``), the ops of a
traced step that XLA cannot compile, and the check that XLA saw kerastrainer's default flags.
It leaves to the step runner (``step_runner.py``) building the train function for
:attr:`XlaPolicy.region`, its first call (the checks before and during the compile), and
rebuilding it when the policy turns XLA off.
"""
from __future__ import annotations

import os
import re
from typing import List, Optional, Union

import tensorflow as tf

from .._internals import xla_kernel_device_types
from ..utils import logger
from ..utils.devices import device_type
from ..utils.utils import execute_only_once
from ..utils.xla_flags import default_flags_state

__all__ = ["XlaPolicy", "xla_unsupported_ops", "replica_devices"]

_xla_kernels_registered = False


def _xla_kernel_registration(x):  # a one-op XLA module (named so in XLA dumps)
    return x + 1


def xla_unsupported_ops(concrete_function, device_type: str = "CPU") -> List[str]:
    """``'OpType (node)'`` of each op of the XLA-compiled functions in a traced function
    that has no XLA kernel on ``device_type`` (``'CPU'``/``'GPU'``): what XLA would fail on.

    Read from the graph, before anything runs: no data is consumed, no collective started.
    """
    global _xla_kernels_registered
    if not _xla_kernels_registered:  # XLA registers its compilation kernels when first used
        with tf.device("/device:CPU:0"):
            tf.function(_xla_kernel_registration, jit_compile=True)(tf.constant(0.0))
        _xla_kernels_registered = True
    jit_device = f"XLA_{device_type.upper()}_JIT"
    library = {f.signature.name: f for f in concrete_function.graph.as_graph_def().library.function}
    todo = [name for name, f in library.items() if "_XlaMustCompile" in f.attr and f.attr["_XlaMustCompile"].b]
    seen, bad, supported = set(todo), {}, {}
    while todo:
        for node in library[todo.pop()].node_def:
            called = [node.op] if node.op in library else []
            for value in node.attr.values():
                called += [value.func.name] if value.HasField("func") else [f.name for f in value.list.func]
            for name in called:
                if name in library and name not in seen:
                    seen.add(name)
                    todo.append(name)
            if node.op in library:
                continue
            if node.op not in supported:
                supported[node.op] = jit_device in xla_kernel_device_types(node.op)
            if not supported[node.op]:
                bad.setdefault(node.op, node.name)
    return [f"{op} ({name})" for op, name in sorted(bad.items())]


_NO_XLA_KERNEL = re.compile(r"No registered '([^']+)' OpKernel for XLA_\w+ devices")


def xla_error_ops(error: Exception) -> Optional[List[str]]:
    """The ops an XLA compile error names, or None when the error is not XLA's."""
    msg = str(error)
    if not re.search(r"XLA_\w+_JIT|tf2xla|XLA compilation|_XlaMustCompile", msg):
        return None
    return sorted(set(_NO_XLA_KERNEL.findall(msg))) or ["(an op XLA rejected, see the message)"]


def replica_devices(strategy: tf.distribute.Strategy) -> List[str]:
    """The devices this process's replicas run on."""
    try:
        devices = list(strategy.extended.worker_devices)
    except (RuntimeError, AttributeError, NotImplementedError):  # the default strategy has none
        devices = []
    if not devices:
        gpus = tf.config.list_logical_devices("GPU")
        devices = [gpus[0].name if gpus else "/device:CPU:0"]
    return devices


def check_default_xla_flags() -> None:
    """XLA on a GPU: warn (once) if XLA may have read XLA_FLAGS before kerastrainer added its defaults."""
    state = default_flags_state()
    if state["result"] == "added" and state["tf_started"] and execute_only_once():
        logger.warning(
            "TensorFlow had started before kerastrainer was imported, so XLA may not see the XLA_FLAGS it "
            "added (%s). A Keras model whose convolutions have biases can then sit for minutes in its first "
            "XLA compile with the GPU idle. Import kerastrainer before running TensorFlow, or set XLA_FLAGS "
            "in the shell.", " ".join(f for f in os.environ.get("XLA_FLAGS", "").split()
                                       if f.startswith("--xla_disable_hlo_passes")))


class XlaPolicy:
    """Whether and where a run uses XLA (see the module docstring). It decides and records its
    decision; it never touches the trainer: whoever builds the step reads :attr:`region`, and
    rebuilds the step when :meth:`disable` or :meth:`cannot_compile` turns XLA off.

    Attributes:
        jit_compile: what was asked: True, False or ``'auto'``.
        use_xla: what this run does (set by :meth:`resolve`, cleared by a fallback).
        region: ``'step'``, ``'forward_backward'`` or None (no XLA).

    Example::

        xla = XlaPolicy('auto')
        xla.resolve(['/device:GPU:0'], auto_on_cpu=False)         # -> True
        xla.choose_region(one_device=True, own_reduce=False)     # -> 'step'
        if xla.disable('LMS edits the step'):                     # XLA was on: rebuild the step
            ...
    """

    def __init__(self, jit_compile: Union[bool, str] = "auto"):
        if isinstance(jit_compile, str) and jit_compile != "auto" or jit_compile not in (True, False, "auto"):
            raise ValueError(f"jit_compile must be True, False or 'auto'; got {jit_compile!r}")
        self.jit_compile = jit_compile if jit_compile == "auto" else bool(jit_compile)
        self.use_xla = False
        self._region: Optional[str] = None

    @property
    def region(self) -> Optional[str]:
        return self._region if self.use_xla else None

    # --- deciding ------------------------------------------------------------------------
    def resolve(self, devices: List[str], auto_on_cpu: bool = False) -> bool:
        """Decide ``use_xla`` for replicas on ``devices`` (before the step is built)."""
        if self.jit_compile != "auto":
            self.use_xla = bool(self.jit_compile)
        else:
            self.use_xla = any(device_type(d) == "GPU" or auto_on_cpu for d in devices)
        if self.use_xla and any(device_type(d) == "GPU" for d in devices):
            check_default_xla_flags()
        return self.use_xla

    def choose_region(self, one_device: bool, own_reduce: bool) -> Optional[str]:
        """The whole step on one device whose update has no all-reduce of its own; else forward
        and backward only (a collective in the update cannot be in the cluster)."""
        self._region = "step" if one_device and not own_reduce else "forward_backward"
        return self.region

    # --- giving XLA up -------------------------------------------------------------------
    def disable(self, reason: str, impossible: bool = False) -> bool:
        """Train without XLA (a callback whose graph changes XLA would undo, e.g. LMS), before the
        first step. ``jit_compile=True`` keeps XLA, with a warning, unless XLA is ``impossible`` there
        (then it is off, with a warning). True when XLA was turned off."""
        if not self.use_xla:
            return False
        if self.jit_compile is True and impossible:
            logger.warning("jit_compile=True cannot be honoured: %s; training without XLA.", reason)
            self.use_xla = False
            return True
        if self.jit_compile is True:
            logger.warning("jit_compile=True: XLA stays on although %s.", reason)
            return False
        logger.info("XLA off (jit_compile='auto'): %s.", reason)
        self.use_xla = False
        return True

    def cannot_compile(self, ops: List[str], why: str, error: Optional[Exception] = None) -> None:
        """``'auto'``: warn and turn XLA off (the caller rebuilds the step); True: raise naming the ops."""
        names = ", ".join(ops)
        if self.jit_compile is True:
            msg = (f"jit_compile=True, but XLA cannot compile the train step: {names} ({why}). Remove "
                   "these ops from the tower (e.g. tf.py_function, string ops), or use jit_compile='auto' "
                   "(falls back to no XLA) or False.")
            if error is not None:
                raise type(error)(error.node_def, error.op, msg) from error
            raise ValueError(msg)
        logger.warning("XLA cannot compile the train step: %s (%s). Training without XLA "
                       "(jit_compile='auto'); pass jit_compile=False to skip this attempt.", names, why)
        self.use_xla = False

    def log_first_call(self, traced: float, first: float, k: int) -> None:
        if self.use_xla:
            logger.info("XLA: compiled the train step (%s) in %.1f s (the first call, %d step(s); tracing "
                        "took %.1f s before it).", "forward, backward and update" if self.region == "step"
                        else "forward and backward", first, k, traced)
        else:
            logger.info("Traced the train function in %.1f s; its first call (%d step(s)) took %.1f s.",
                        traced, k, first)
