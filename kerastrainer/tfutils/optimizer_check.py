"""Which hyper-parameters of an optimizer are not finite numbers (a NaN or Inf learning rate,
beta, epsilon...): checked when training starts, and named when the cost becomes NaN."""
from __future__ import annotations

import math
from typing import List, Tuple

import numpy as np

__all__ = ["nonfinite_hyperparameters", "trainer_optimizers", "describe_nonfinite_hyperparameters"]


def nonfinite_hyperparameters(optimizer) -> List[Tuple[str, float]]:
    """``[(name, value)]`` of the optimizer's numeric hyper-parameters that are NaN or Inf; the
    learning rate is read as the optimizer uses it now (a schedule at the current iteration)."""
    opt = getattr(optimizer, "inner_optimizer", optimizer)   # LossScaleOptimizer
    found = {}
    try:
        config = opt.get_config()
    except Exception:   # noqa: BLE001 (an optimizer without a Keras config: only its learning rate)
        config = {}
    for name, value in config.items():
        if isinstance(value, float) and not math.isfinite(value):
            found[name] = value
    try:
        lr = np.asarray(opt.learning_rate, dtype=np.float64)
    except Exception:   # noqa: BLE001 (no learning rate, or not one number)
        lr = None
    if lr is not None and lr.size == 1 and not np.isfinite(lr).all():
        found["learning_rate"] = float(lr.reshape(()))
    return sorted(found.items())


def trainer_optimizers(trainer) -> List[Tuple[str, object]]:
    """``[(label, optimizer)]`` of a trainer: each objective's, or its one optimizer."""
    objectives = getattr(trainer, "objectives", None) or []
    if len(objectives) > 1:
        return [(f"the optimizer of objective '{o.name}'", o.optimizer) for o in objectives]
    opt = objectives[0].optimizer if objectives else getattr(trainer, "optimizer", None)
    return [] if opt is None else [("the optimizer", opt)]


def describe_nonfinite_hyperparameters(trainer) -> str:
    """One sentence naming each non-finite hyper-parameter of the trainer's optimizers, or ''."""
    parts = []
    for label, opt in trainer_optimizers(trainer):
        bad = nonfinite_hyperparameters(opt)
        if bad:
            parts.append(f"{label} ({type(getattr(opt, 'inner_optimizer', opt)).__name__}) has "
                         + ", ".join(f"{k}={v}" for k, v in bad))
    return "; ".join(parts)
