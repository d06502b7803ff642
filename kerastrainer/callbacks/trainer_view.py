"""What a callback may read and call on its trainer: :class:`TrainerView`, one type.

Every trainer is a ``TrainerView`` (``train/base.py``'s ``Trainer`` derives from it), and the
built-in callbacks read ``self.trainer`` only through the names declared here (a test holds
this). The defaults are what a trainer that lacks a feature has (no monitors, no checkpoint,
one replica), so a callback never probes its trainer with ``getattr``. This module declares;
the fit loop (``train/loop.py``) writes the counters and the trainer provides the rest. (A
trainer names its variables with ``named_variables()`` where it can; ``ModelSaver`` writes a
plain ``checkpoint`` for one that cannot.)

Example (a callback)::

    class PrintLR(Callback):
        def _trigger_epoch(self):
            t = self.trainer                         # a TrainerView
            lr = float(t.get_hyperparam_var('learning_rate').numpy())
            logger.info("epoch %d, step %d: lr %g", t.epoch_num, t.global_step, lr)
"""
from __future__ import annotations

import types
from contextlib import nullcontext
from typing import Any, ContextManager, Dict, Mapping, Optional, Sequence, Tuple

__all__ = ["TrainerView"]


class TrainerView:
    """The trainer as callbacks see it (docs/internals.md, "The trainer, as callbacks see it").

    Counters (written by the fit loop between calls):
        epoch_num, global_step, local_step, steps_per_epoch, starting_epoch, max_epoch;
        last_step_outputs (name -> float of the last call; ``'_nonfinite_step'`` and
        ``'_nonfinite_grads_step'``: the first global step of the call with a NaN/Inf cost or
        gradient, or -1); last_call_steps; loop_completed (the loop ended normally or by a
        callback's ``StopTraining``).

    The run: is_chief, num_replicas, strategy, model, input (the InputSource), input_signature,
    optimizer, named_optimizers, checkpoint, monitors, step_runner, outputs_are_latest,
    loss_names, step_loss().
    """

    # --- counters ----------------------------------------------------------------------------
    epoch_num: int = 0
    global_step: int = 0
    local_step: int = 0
    steps_per_epoch: int = 0
    starting_epoch: int = 1
    max_epoch: int = 0
    last_step_outputs: Mapping[str, float] = types.MappingProxyType({})
    last_call_steps: int = 0
    loop_completed: bool = False

    # --- the run -----------------------------------------------------------------------------
    is_chief: bool = True
    num_replicas: int = 1
    strategy: Any = None
    model: Any = None
    input: Any = None
    input_signature: Optional[Sequence] = None
    optimizer: Any = None
    checkpoint: Any = None
    monitors: Any = None
    step_runner: Any = None
    #: the outputs are the last step's running values (Keras metrics), not the call's means
    outputs_are_latest: bool = False
    #: the step's own statistics in ``last_step_outputs``: ``'cost'`` of a tower function, each
    #: cost's name when it returns several, the logs of a Keras ``train_step`` (``'loss'``, metrics)
    loss_names: Sequence[str] = ("cost",)

    @property
    def named_optimizers(self) -> Optional[Dict[str, Any]]:
        """``{objective name: optimizer}`` with several objectives; None with one optimizer."""
        return None

    def step_loss(self) -> Tuple[str, Optional[float]]:
        """The name and value of the step's loss in ``last_step_outputs`` (``'cost'`` of a tower
        function, a Keras step's ``'loss'``); the value is None when the outputs lack it."""
        names = list(self.loss_names)
        name = "loss" if "loss" in names else (names[0] if names else "cost")
        return name, self.last_step_outputs.get(name)

    def get_hyperparam_var(self, name: str):
        """The variable behind a hyper-parameter (``'learning_rate'``, a variable name)."""
        raise KeyError(f"{type(self).__name__} has no hyper-parameter {name!r}.")

    def get_predictor(self, input_names: Sequence[str], output_names: Sequence[str], **kwargs):
        """A callable numpy -> numpy running the model in inference mode on the current weights."""
        raise NotImplementedError(f"{type(self).__name__} makes no predictors.")

    def get_tower_predictor(self, tower_func: Any, input_names: Sequence[str], output_names: Sequence[str]):
        """Like :meth:`get_predictor`, with another tower function (``tower_func(*inputs)``, with an
        ``input_signature``) run on the trainer's variables (``InferenceRunner(tower_func=...)``)."""
        raise NotImplementedError(f"{type(self).__name__} runs no other tower function on its variables.")

    def sync_counters(self) -> None:
        """Copy the Python counters into the checkpoint's ``global_step`` and ``epoch`` variables
        (before a save); an epoch counts once its last step is done."""
        done_epochs = self.epoch_num if self.local_step >= self.steps_per_epoch else self.epoch_num - 1
        for attr, value in (("global_step", self.global_step), ("epoch", done_epochs)):
            var = getattr(self.checkpoint, attr, None)
            if var is not None and hasattr(var, "assign"):
                var.assign(int(value))

    def disable_xla(self, reason: str) -> None:
        """Train without XLA (called in a callback's ``setup_graph``, before the first step)."""

    def callback_setup_scope(self, callback) -> ContextManager:
        """Where ``callback._setup_graph`` runs (a custom trainer's TF1 graph for a program's own)."""
        return nullcontext()

    def tf1_callback_graph_scope(self, callback, error: Exception) -> Optional[ContextManager]:
        """Where ``callback._setup_graph`` runs again after it failed eagerly with ``error`` because it
        builds graph-only TF1 ops (a TF1 graph of the trainer's); None: the error stands."""
        return None
