"""Objectives: a training step with several costs, each minimised by its own optimizer over
its own variables (GANs, a critic trained more often than its generator, auxiliary losses with
their own learning rate).

This module owns what an objective is and which variables it selects. The trainer owns the step
(:mod:`kerastrainer.train.train_function`): one forward pass of the tower per step computes every
cost; each objective due at that step takes its gradients from that pass; then every due update
is applied. Each objective's gradients see the weights as they were before any update of the
step (tensorpack's ``GANTrainer`` rule); an objective with ``every=n`` is updated on the steps
whose global step (before the step) is a multiple of ``n`` (tensorpack's ``SeparateGANTrainer``
periods); one with ``repeat=n`` is updated n times a step, the first n - 1 from passes of their
own before the main pass (WGAN-GP's critic iterations).

Data-parallel rule (every trainer): each replica computes every cost on its own part of the
batch; an objective's gradients are averaged over the replicas before its update, so for costs
that are means over the batch, N replicas train exactly as one replica on the N parts together.
"""
from __future__ import annotations

import re
from typing import Callable, Dict, List, Optional, Sequence, Union

from .._internals import tf_variable_of

__all__ = ["Objective", "OwnUpdates", "VariableSelection"]

# a regular expression (matched from the start of the variable's name), a predicate on the
# name, or the variables (or Keras layers / models owning them) themselves
VariableSelection = Union[None, str, Callable[[str], bool], Sequence[object]]

_NAME = re.compile(r"[A-Za-z0-9_.\-]+")


class Objective:
    """One cost of a step with several, minimised by ``optimizer`` over ``variables``.

    ``build_graph`` returns a dict of scalar costs; ``optimizer()`` returns a list of objectives,
    one per cost to minimise. Each cost is reported to the monitors under its key.

    Args:
        cost: the key of the cost in the dict ``build_graph`` returns.
        optimizer: a Keras optimizer (a ``tf.compat.v1.train`` one is translated, as for
            ``optimizer()``). Under ``precision='mixed_float16'`` each gets its own loss scale.
        variables: which trainable variables it updates: a regular expression matched from the
            start of the variable's name (``'gen/'``, ``'discrim'``: tensorpack's scope names), a
            predicate ``name -> bool``, or a list of variables / Keras layers. None: every
            trainable variable. Selecting none is an error.
        every: update on the steps whose global step is a multiple of ``every`` (1: every step).
        repeat: updates a step (a critic trained several times per generator update, as in
            WGAN-GP): the first ``repeat - 1`` each from a forward pass of their own on the step's
            batch (random ops in the tower draw anew), made before the step's main pass, whose
            gradients give every due objective's last update and whose costs are reported.
        name: the name of its optimizer in checkpoints (``optimizer/<name>/...``) and of its
            learning rate for callbacks (``'<name>/learning_rate'``); the cost's key by default.

    Example::

        class GAN(ModelDesc):
            def build_graph(self, real, z):
                with tf.name_scope('gen'):   # FullyConnected('gen/fc', ...) etc.
                    fake = self.generator(z)
                d_real, d_fake = self.discriminator(real), self.discriminator(fake)
                ...
                return {'d_loss': d_loss, 'g_loss': g_loss}

            def optimizer(self):
                return [Objective('d_loss', keras.optimizers.Adam(2e-4, beta_1=0.5), variables='discrim/'),
                        Objective('g_loss', keras.optimizers.Adam(2e-4, beta_1=0.5), variables='gen/')]

        # a schedule for one optimizer:
        ScheduledHyperParamSetter('g_loss/learning_rate', [(10, 1e-4)])
    """

    def __init__(self, cost: str, optimizer, variables: VariableSelection = None, every: int = 1,
                 name: Optional[str] = None, repeat: int = 1):
        if not isinstance(cost, str) or not cost:
            raise TypeError(f"Objective: cost must be the key (a string) of a cost build_graph returns; got {cost!r}.")
        for arg, value in (("every", every), ("repeat", repeat)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Objective('{cost}'): {arg} must be a whole number >= 1; got {value!r}.")
        name = cost if name is None else name
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError(f"Objective('{cost}'): name {name!r} must be letters, digits, '_', '.' or '-' "
                             "(it keys the optimizer's state in checkpoints).")
        if variables is not None and not (isinstance(variables, str) or callable(variables)
                                          or isinstance(variables, (list, tuple))):
            raise TypeError(f"Objective('{cost}'): variables must be a regular expression, a predicate on the "
                            f"variable name, or a list of variables or layers; got {type(variables).__name__}.")
        self.cost = cost
        self.optimizer = optimizer
        self.variables = variables
        self.every = every
        self.repeat = repeat
        self.name = name

    def __repr__(self) -> str:
        extra = f", every={self.every}" if self.every != 1 else ""
        extra += f", repeat={self.repeat}" if self.repeat != 1 else ""
        return f"Objective({self.cost!r}, {type(self.optimizer).__name__}{extra})"

    def with_optimizer(self, optimizer) -> "Objective":
        """A copy minimised by ``optimizer`` (a translated or wrapped one)."""
        return Objective(self.cost, optimizer, self.variables, self.every, self.name, self.repeat)

    def select(self, named_trainable: Dict[str, object]) -> List[object]:
        """The trainable variables (of ``{name: variable}``) it updates, in that dict's order."""
        sel = self.variables
        if sel is None:
            chosen = list(named_trainable.values())
        elif isinstance(sel, str):
            try:
                pattern = re.compile(sel)
            except re.error as e:
                raise ValueError(f"Objective('{self.cost}'): variables={sel!r} is not a regular expression: {e}") \
                    from None
            chosen = [v for n, v in named_trainable.items() if pattern.match(n)]
        elif callable(sel):
            chosen = [v for n, v in named_trainable.items() if sel(n)]
        else:
            wanted = {id(tf_variable_of(v)) for item in sel
                      for v in (getattr(item, "trainable_weights", None) or [item])}
            chosen = [v for v in named_trainable.values() if id(tf_variable_of(v)) in wanted]
        if not chosen:
            sample = ", ".join(list(named_trainable)[:12])
            raise ValueError(f"Objective('{self.cost}'): variables={sel!r} selects no trainable variable. "
                             f"The model's trainable variables are: {sample}"
                             f"{' ...' if len(named_trainable) > 12 else ''}.")
        return chosen


class OwnUpdates:
    """What ``optimizer()`` returns for a tower that updates its variables itself (a Keras model's
    own ``train_step`` calling ``self.optimizer.apply``): the optimizers it uses, by name. The
    trainer applies no update; it runs the tower each step, saves these optimizers' state in
    checkpoints (``optimizer/<name>/...``) and lets callbacks set their learning rates
    (``'<name>/learning_rate'``). ``build_graph`` returns a dict of the step's statistics.
    ``single=True`` with one optimizer: it is the model's one optimizer, saved under ``optimizer/``
    and set as ``'learning_rate'``, as a model's ``optimizer()`` returning it would be.

    Example (what ``KerasModel`` does for a model whose class overrides ``train_step``)::

        def optimizer(self):
            return OwnUpdates({'d_optimizer': gan.d_optimizer, 'g_optimizer': gan.g_optimizer})
    """

    def __init__(self, optimizers: Dict[str, object], single: bool = False):
        if not optimizers:
            raise ValueError("OwnUpdates: the tower updates its variables with no optimizer; give the "
                             "optimizers it uses ({name: optimizer}).")
        bad = [n for n in optimizers if not isinstance(n, str) or not _NAME.fullmatch(n)]
        if bad:
            raise ValueError(f"OwnUpdates: optimizer names {bad!r} must be letters, digits, '_', '.' or '-'.")
        if single and len(optimizers) != 1:
            raise ValueError(f"OwnUpdates(single=True) takes one optimizer; got {sorted(optimizers)}.")
        self.optimizers = dict(optimizers)
        self.single = bool(single)


def is_objective_list(value) -> bool:
    """``value`` is what ``optimizer()`` returns for a step with several costs."""
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(o, Objective) for o in value)


def check_objectives(objectives: Sequence[Objective]) -> None:
    """Refuse two objectives of one name (their optimizers would share a checkpoint key)."""
    names = [o.name for o in objectives]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"optimizer(): several objectives are named {dup}; give each a name "
                         "(Objective(..., name='...')): it keys its optimizer in checkpoints.")
