"""What a trainer minimises, resolved at set-up: one optimizer over every trainable variable (a
model whose ``optimizer()`` returns an optimizer), or one entry per
:class:`~kerastrainer.tfutils.objective.Objective` (a model whose ``build_graph`` returns a dict
of costs). Checked here, with errors that name the model and what to change; the train function
(:mod:`.train_function`) runs them.

Example (what ``Trainer.setup_graph`` does)::

    trainer.objectives = resolve_objectives(model, model.get_optimizer(), tower.cost_names,
                                            named_trainable, precision)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

import keras

from ..tfutils.objective import OwnUpdates, check_objectives, is_objective_list
from ..utils import logger

__all__ = ["StepObjective", "resolve_objectives"]


@dataclass
class StepObjective:
    """One update of the step: ``optimizer`` minimises cost ``cost`` (None: the tower's only cost)
    over ``variables``, on the steps whose global step is a multiple of ``every``."""
    name: str
    cost: Optional[str]
    optimizer: keras.optimizers.Optimizer
    variables: list
    every: int = 1
    implicit: bool = False   # the model's single optimizer (not an Objective of the program)
    repeat: int = 1
    applied: bool = True     # False: the tower applies this optimizer itself (OwnUpdates)

    @property
    def loss_scaled(self) -> bool:
        return isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)


def _keras_optimizer(model, opt, precision: Optional[str], what: str):
    if not isinstance(opt, keras.optimizers.Optimizer):
        raise TypeError(f"{type(model).__name__}.optimizer() must return a Keras optimizer{what}; "
                        f"got {type(opt).__name__}")
    if precision == "mixed_float16" and not isinstance(opt, keras.optimizers.LossScaleOptimizer):
        opt = keras.optimizers.LossScaleOptimizer(opt)   # each optimizer its own loss scale
    return opt


def resolve_objectives(model, opt, cost_names: Optional[List[str]], named_trainable: Dict[str, object],
                       precision: Optional[str]) -> List[StepObjective]:
    """The step's updates for ``opt`` (what ``optimizer()`` returned), with each optimizer built."""
    owner = type(model).__name__
    if isinstance(opt, OwnUpdates):
        if cost_names is None:
            raise ValueError(f"{owner}: a tower that updates its own variables returns a dict of its "
                             "statistics from build_graph.")
        out = []
        for name, o in opt.optimizers.items():
            if not isinstance(o, keras.optimizers.Optimizer):
                raise TypeError(f"{owner}: optimizer '{name}' of the step is a {type(o).__name__}, not a Keras "
                                "optimizer.")
            out.append(StepObjective(name, None, o, [], applied=False, implicit=opt.single))
        return out
    if not is_objective_list(opt):
        if cost_names is not None:
            raise ValueError(f"{owner}.build_graph returned a dict of costs ({', '.join(cost_names)}): "
                             "optimizer() must then return a list of kerastrainer.Objective, one per cost to "
                             "minimise, e.g. [Objective('d_loss', Adam(2e-4), variables='discrim/'), ...].")
        if isinstance(opt, (list, tuple)):
            raise TypeError(f"{owner}.optimizer() returned a {type(opt).__name__} of "
                            f"{sorted({type(o).__name__ for o in opt})}: return one Keras optimizer, or a "
                            "list of kerastrainer.Objective.")
        opt = _keras_optimizer(model, opt, precision, "")
        variables = list(named_trainable.values())
        opt.build(variables)
        return [StepObjective("optimizer", None, opt, variables, implicit=True)]
    if cost_names is None:
        raise ValueError(f"{owner}.optimizer() returned Objectives ({', '.join(o.cost for o in opt)}) but "
                         "build_graph returned one cost: return a dict of costs, one per Objective, e.g. "
                         "{'d_loss': d_loss, 'g_loss': g_loss}.")
    check_objectives(opt)
    missing = [o.cost for o in opt if o.cost not in cost_names]
    if missing:
        raise ValueError(f"{owner}: Objective cost(s) {missing} are not among the costs build_graph returns "
                         f"({', '.join(cost_names)}).")
    unused = [c for c in cost_names if c not in {o.cost for o in opt}]
    if unused:
        logger.info("%s: cost(s) %s are reported, and minimised by no Objective.", owner, ", ".join(unused))
    if len({id(o.optimizer) for o in opt}) < len(opt):
        raise ValueError(f"{owner}: two Objectives share one optimizer object; give each its own (an "
                         "optimizer keeps per-variable state and one step counter).")
    out = []
    for o in opt:
        k = _keras_optimizer(model, o.optimizer, precision, f" in Objective('{o.cost}')")
        variables = o.select(named_trainable)
        k.build(variables)
        out.append(StepObjective(o.name, o.cost, k, variables, o.every, repeat=o.repeat))
    claimed: Dict[int, str] = {}
    for o in out:
        for v in o.variables:
            if id(v) in claimed and claimed[id(v)] != o.name:
                logger.info("%s: variable %s is updated by both '%s' and '%s'.", owner,
                            getattr(v, "path", getattr(v, "name", "?")), claimed[id(v)], o.name)
            claimed.setdefault(id(v), o.name)
    idle = [n for n, v in named_trainable.items() if id(v) not in claimed]
    if idle:
        logger.warning("%s: %d trainable variable(s) are updated by no Objective and stay as they are: %s",
                       owner, len(idle), ", ".join(idle[:10]) + (" ..." if len(idle) > 10 else ""))
    logger.info("Objectives: %s.", "; ".join(
        f"{o.name}: {type(getattr(o.optimizer, 'inner_optimizer', o.optimizer)).__name__} on "
        f"{len(o.variables)} variable(s)" + (f", every {o.every} steps" if o.every > 1 else "")
        + (f", {o.repeat} updates a step" if o.repeat > 1 else "") for o in out))
    return out

