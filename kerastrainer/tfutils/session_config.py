"""A TF1 session config (``tf.compat.v1.ConfigProto``) applied to TF2's runtime through ``tf.config``.

tensorpack gave each session a ``ConfigProto`` (``get_default_sess_config()``,
``TrainConfig(session_config=...)``). TF2 has one runtime per process, configured by ``tf.config``;
each field with a counterpart is applied there:

=============================================  ==================================================
``intra_op_parallelism_threads``               ``tf.config.threading.set_intra_op_parallelism_threads``
``inter_op_parallelism_threads``               ``tf.config.threading.set_inter_op_parallelism_threads``
``allow_soft_placement``                       ``tf.config.set_soft_device_placement``
``log_device_placement``                       ``tf.debugging.set_log_device_placement``
``gpu_options.allow_growth``                   ``tf.config.experimental.set_memory_growth`` (every GPU)
``gpu_options.visible_device_list``            ``tf.config.set_visible_devices`` (those GPUs)
``device_count['GPU'] = 0``                    ``tf.config.set_visible_devices([], 'GPU')``
``gpu_options.allocator_type = 'BFC'``         TF2's only allocator: nothing to do
``graph_options.optimizer_options``            ``tf.config.optimizer.set_jit`` (``ON_1``/``ON_2``:
``.global_jit_level``                          auto-clustering, ``OFF``: none)
``graph_options.rewrite_options.<toggle>``     ``tf.config.optimizer.set_experimental_options``
=============================================  ==================================================

Every other field set in the proto has no TF2 counterpart and is named in one warning; a field
the runtime can no longer change (threads, visible devices and memory growth once TensorFlow has
started) is named in a warning that says to apply the config at the start of the program.

Example::

    conf = get_default_sess_config()
    conf.intra_op_parallelism_threads = 4
    apply_session_config(conf, "my program")
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import tensorflow as tf

from ..utils import logger

__all__ = ["apply_session_config", "session_config_fields"]

# RewriterConfig toggles that tf.config.optimizer.set_experimental_options takes, by the same name
_REWRITE_TOGGLES = ("layout_optimizer", "constant_folding", "shape_optimization", "remapping",
                    "arithmetic_optimization", "dependency_optimization", "loop_optimization",
                    "function_optimization", "debug_stripper", "scoped_allocator_optimization",
                    "pin_to_host_optimization", "implementation_selector", "auto_mixed_precision")
_REWRITE_PLAIN = ("disable_model_pruning", "disable_meta_optimizer", "min_graph_nodes")


def session_config_fields(config) -> List[Tuple[str, object]]:
    """``[(dotted field name, value)]`` of every field set in ``config`` (a ``ConfigProto``)."""
    out = []

    def walk(msg, prefix):
        for fd, value in msg.ListFields():
            name = prefix + fd.name
            if fd.message_type is not None and not fd.is_repeated:
                walk(value, name + ".")
            else:
                out.append((name, value))
    walk(config, "")
    return out


class _Applier:
    def __init__(self):
        self.too_late: List[str] = []
        self.unmapped: List[str] = []
        self.applied: Dict[str, object] = {}

    def runtime_setting(self, field, value, get, set_):
        if get() == value:
            self.applied[field] = value
            return
        try:
            set_(value)
        except RuntimeError:
            self.too_late.append(f"{field}={value!r}")
            return
        self.applied[field] = value

    def gpus_setting(self, field, value, fn):
        try:
            fn()
        except RuntimeError:
            self.too_late.append(f"{field}={value!r}")
            return
        self.applied[field] = value


def _jit_of(level: int):
    levels = tf.compat.v1.OptimizerOptions
    if level in (levels.ON_1, levels.ON_2):
        return "autoclustering"
    if level == levels.OFF:
        return False
    return None   # DEFAULT: TF's own choice


def apply_session_config(config, where: str = "session_config") -> Dict[str, object]:
    """Apply ``config`` (a ``tf.compat.v1.ConfigProto``) through ``tf.config``; ``{field: value}`` applied.

    ``where`` names the caller in the warnings (``"TrainConfig(session_config=...)"``).
    """
    if not isinstance(config, tf.compat.v1.ConfigProto):
        raise TypeError(f"{where}: a session config is a tf.compat.v1.ConfigProto, got {type(config).__name__}.")
    a = _Applier()
    threading = tf.config.threading
    gpus = tf.config.list_physical_devices("GPU")
    for field, value in session_config_fields(config):
        if field == "intra_op_parallelism_threads":
            a.runtime_setting(field, int(value), threading.get_intra_op_parallelism_threads,
                              threading.set_intra_op_parallelism_threads)
        elif field == "inter_op_parallelism_threads":
            a.runtime_setting(field, int(value), threading.get_inter_op_parallelism_threads,
                              threading.set_inter_op_parallelism_threads)
        elif field == "allow_soft_placement":
            tf.config.set_soft_device_placement(bool(value))
            a.applied[field] = bool(value)
        elif field == "log_device_placement":
            tf.debugging.set_log_device_placement(bool(value))
            a.applied[field] = bool(value)
        elif field == "gpu_options.allow_growth":
            a.gpus_setting(field, bool(value),
                           lambda: [tf.config.experimental.set_memory_growth(g, bool(value)) for g in gpus])
        elif field == "gpu_options.visible_device_list":
            ids = [int(i) for i in str(value).split(",") if i.strip()]
            missing = [i for i in ids if i >= len(gpus)]
            if missing:
                raise ValueError(f"{where}: gpu_options.visible_device_list={value!r} names GPU(s) {missing}; this "
                                 f"machine has {len(gpus)}.")
            a.gpus_setting(field, value, lambda: tf.config.set_visible_devices([gpus[i] for i in ids], "GPU"))
        elif field == "device_count":
            for kind, n in dict(value).items():
                if kind.upper() == "GPU" and int(n) == 0:
                    a.gpus_setting("device_count['GPU']", 0, lambda: tf.config.set_visible_devices([], "GPU"))
                else:
                    a.unmapped.append(f"device_count[{kind!r}]={n}")
        elif field == "gpu_options.allocator_type" and str(value) in ("BFC", ""):
            a.applied[field] = value
        elif field == "graph_options.optimizer_options.global_jit_level":
            jit = _jit_of(int(value))
            if jit is not None:
                tf.config.optimizer.set_jit(jit)
            a.applied[field] = value
        elif field.startswith("graph_options.rewrite_options.") and field.rsplit(".", 1)[1] in _REWRITE_TOGGLES:
            on = {1: True, 2: False}.get(int(value))   # RewriterConfig.Toggle: DEFAULT 0, ON 1, OFF 2
            if on is not None:
                tf.config.optimizer.set_experimental_options({field.rsplit(".", 1)[1]: on})
            a.applied[field] = value
        elif field.startswith("graph_options.rewrite_options.") and field.rsplit(".", 1)[1] in _REWRITE_PLAIN:
            key = field.rsplit(".", 1)[1]
            tf.config.optimizer.set_experimental_options({key: int(value) if key == "min_graph_nodes" else bool(value)})
            a.applied[field] = value
        else:
            a.unmapped.append(f"{field}={value!r}")
    if a.too_late:
        logger.warning("%s: %s cannot be applied: TensorFlow's runtime has started and fixed them. Apply the "
                       "config before any TensorFlow op runs (kerastrainer.tfutils.sesscreate.apply_session_config("
                       "conf) at the start of the program), or set them with tf.config there.",
                       where, ", ".join(a.too_late))
    if a.unmapped:
        logger.warning("%s: %s %s no counterpart in TF2's tf.config and %s ignored.", where, ", ".join(a.unmapped),
                       "has" if len(a.unmapped) == 1 else "have", "is" if len(a.unmapped) == 1 else "are")
    if a.applied:
        logger.info("%s applied through tf.config: %s.", where,
                    ", ".join(f"{k}={v!r}" for k, v in a.applied.items()))
    return a.applied
