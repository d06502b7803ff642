"""What one call of the training steps gives the fit loop: :class:`StepResult`; and the one
vector a ``tf.function`` step packs its statistics into (:class:`PackedStats`), encoded and
decoded here, side by side, so no other module reads outputs by position.

It leaves to the step runners (``step_runner.py``, ``tf1_graph_runner.py``) how the steps run,
and to the fit loop (``loop.py``) what the counters and callbacks do with the result.

Example (what a runner does)::

    stats = PackedStats(['cost', 'accuracy'])
    packed = stats.encode([mean_cost, mean_acc], first_bad_grads, first_bad)   # in the tf.function
    result = stats.decode(packed, histograms, steps=k)                        # on the host
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Sequence

import tensorflow as tf

__all__ = ["StepResult", "PackedStats", "NO_STEP"]

NO_STEP = -1   # no step of the call was non-finite


@dataclass(frozen=True)
class StepResult:
    """One call of ``k`` training steps, as the fit loop counts and reports it.

    Attributes:
        steps: steps of the epoch the call ran.
        global_steps: global steps it counted (a custom ``run_step`` counts each hooked run).
        scalars: the call's statistics by name (means over its steps, or the last step's values
            for a step that keeps running values itself, e.g. Keras metrics).
        histograms: tensors or arrays of the call's last step (vectors; NHWC images), by name.
        first_nonfinite: offset from the call's first global step of the first step whose cost
            or gradients were NaN/Inf; ``NO_STEP`` if none.
        first_nonfinite_grads: the same for the gradients alone.
        timed: whether the call's duration may tune ``steps_per_call='auto'``.
    """

    steps: int
    global_steps: int
    scalars: Dict[str, float]
    histograms: Mapping[str, Any] = field(default_factory=dict)
    first_nonfinite: int = NO_STEP
    first_nonfinite_grads: int = NO_STEP
    timed: bool = True


class PackedStats:
    """The layout of a step's statistics in one float32 vector (one host transfer per call):
    ``[names..., first non-finite gradients step, first non-finite step]``."""

    def __init__(self, names: Sequence[str]):
        self.names: List[str] = list(names)

    def encode(self, values: Sequence[tf.Tensor], first_bad_grads: tf.Tensor, first_bad: tf.Tensor) -> tf.Tensor:
        if len(values) != len(self.names):
            raise ValueError(f"{len(values)} statistics for {len(self.names)} names")
        return tf.stack([tf.cast(v, tf.float32) for v in values]
                        + [tf.cast(first_bad_grads, tf.float32), tf.cast(first_bad, tf.float32)])

    def decode(self, packed, histograms: Mapping[str, Any], steps: int, timed: bool = True) -> StepResult:
        values = packed.numpy().tolist() if hasattr(packed, "numpy") else list(packed)
        n = len(self.names)
        return StepResult(steps=steps, global_steps=steps, scalars=dict(zip(self.names, values[:n])),
                          histograms=dict(histograms), first_nonfinite=int(values[n + 1]),
                          first_nonfinite_grads=int(values[n]), timed=timed)
