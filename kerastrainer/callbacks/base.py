"""The Callback protocol: how code runs between training calls.

The trainer's main loop, as in tensorpack::

    callbacks.setup_graph(trainer)        # once, after the model is built
    callbacks.before_train()
    for epoch_num in range(starting_epoch, max_epoch + 1):
        callbacks.before_epoch()
        while local_step < steps_per_epoch:
            <one call of the train function: k steps, no Python between them>
            callbacks.trigger_step()      # after each call
        callbacks.after_epoch()
        callbacks.trigger_epoch()         # monitors write stats here
    callbacks.after_train()

One train call runs several steps (``steps_per_call``). A callback that must see
particular steps says so with :meth:`Callback.steps_to_next_trigger`: the trainer
ends the current call exactly after that many steps. Returning 1 asks for every step.

Subclasses override the underscore methods. Example::

    class PrintLR(Callback):
        def _trigger_epoch(self):
            lr = self.trainer.get_hyperparam_var('learning_rate').numpy()
            logger.info("epoch %d: lr %g", self.epoch_num, lr)
"""
from __future__ import annotations

from typing import Optional

__all__ = ["Callback", "ProxyCallback", "CallbackFactory", "StopTraining"]


class StopTraining(Exception):
    """Raise from a callback to end training cleanly after the current call."""


class Callback:
    """Base class of callbacks.

    Attributes:
        trainer: the trainer, set by :meth:`setup_graph`.
        chief_only: run only on the chief worker (rank 0) in multi-worker training.
            True by default, as in tensorpack; callbacks that every worker must run
            (e.g. hyper-parameter schedules) set it False.
    """

    _chief_only = True
    trainer = None

    # --- the protocol, called by the trainer ---------------------------------------------
    def setup_graph(self, trainer) -> None:
        self.trainer = trainer
        # the trainer says where set-up runs (a custom trainer's TF1 graph, for the program's callbacks)
        try:
            with trainer.callback_setup_scope(self):
                self._setup_graph()
        except RuntimeError as e:
            # a program's callback building graph-only TF1 ops (tf.placeholder) sets up in a TF1 graph
            scope = trainer.tf1_callback_graph_scope(self, e)
            if scope is None:
                raise
            with scope:
                self._setup_graph()

    def before_train(self) -> None:
        self._before_train()

    def before_epoch(self) -> None:
        self._before_epoch()

    def trigger_step(self) -> None:
        self._trigger_step()

    def after_epoch(self) -> None:
        self._after_epoch()

    def trigger_epoch(self) -> None:
        self._trigger_epoch()

    def trigger(self) -> None:
        self._trigger()

    def after_train(self) -> None:
        self._after_train()

    def steps_to_next_trigger(self) -> Optional[int]:
        """Steps after which this callback wants ``trigger_step`` to run; None if any will do.

        Called before each train call. The trainer runs at most this many steps in
        the call. Return 1 to see every step.
        """
        return None

    # --- override these -----------------------------------------------------------------
    def _setup_graph(self):
        pass

    def _before_train(self):
        pass

    def _before_epoch(self):
        pass

    def _trigger_step(self):
        pass

    def _after_epoch(self):
        pass

    def _trigger_epoch(self):
        self.trigger()

    def _trigger(self):
        pass

    def _after_train(self):
        pass

    # --- conveniences --------------------------------------------------------------------
    @property
    def epoch_num(self) -> int:
        return self.trainer.epoch_num

    @property
    def global_step(self) -> int:
        return self.trainer.global_step

    @property
    def local_step(self) -> int:
        return self.trainer.local_step

    @property
    def chief_only(self) -> bool:
        return self._chief_only

    @chief_only.setter
    def chief_only(self, v: bool):
        self._chief_only = bool(v)

    def set_chief_only(self, v: bool = True) -> "Callback":
        """Set :attr:`chief_only` and return the callback (tensorpack's), e.g.
        ``InferenceRunner(val, infs).set_chief_only(False)`` to evaluate on every worker."""
        self.chief_only = v
        return self

    def __str__(self):
        return type(self).__name__


class ProxyCallback(Callback):
    """A callback that forwards every hook to another one."""

    def __init__(self, cb: Callback):
        self.cb = cb
        self.chief_only = cb.chief_only

    def _setup_graph(self):
        self.cb.setup_graph(self.trainer)

    def _before_train(self):
        self.cb.before_train()

    def _before_epoch(self):
        self.cb.before_epoch()

    def _trigger_step(self):
        self.cb.trigger_step()

    def _after_epoch(self):
        self.cb.after_epoch()

    def _trigger_epoch(self):
        self.cb.trigger_epoch()

    def _trigger(self):
        self.cb.trigger()

    def _after_train(self):
        self.cb.after_train()

    def steps_to_next_trigger(self):
        return self.cb.steps_to_next_trigger()

    def __str__(self):
        return "Proxy-" + str(self.cb)


class CallbackFactory(Callback):
    """A callback made of plain functions, each taking the callback itself."""

    def __init__(self, setup_graph=None, before_train=None, trigger=None, after_train=None,
                 trigger_step=None, trigger_epoch=None):
        self._cb_setup_graph = setup_graph
        self._cb_before_train = before_train
        self._cb_trigger = trigger
        self._cb_after_train = after_train
        self._cb_trigger_step = trigger_step
        self._cb_trigger_epoch = trigger_epoch

    def _setup_graph(self):
        if self._cb_setup_graph:
            self._cb_setup_graph(self)

    def _before_train(self):
        if self._cb_before_train:
            self._cb_before_train(self)

    def _trigger(self):
        if self._cb_trigger:
            self._cb_trigger(self)

    def _trigger_step(self):
        if self._cb_trigger_step:
            self._cb_trigger_step(self)

    def _trigger_epoch(self):
        if self._cb_trigger_epoch:
            self._cb_trigger_epoch(self)
        else:
            self.trigger()

    def _after_train(self):
        if self._cb_after_train:
            self._cb_after_train(self)
