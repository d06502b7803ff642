"""TrainConfig and AutoResumeTrainConfig: everything a training run needs, in one object."""
from __future__ import annotations

import os
from typing import Optional, Sequence

from ..callbacks.base import Callback
from ..callbacks.defaults import DEFAULT_CALLBACKS, DEFAULT_MONITORS
from ..dataflow.base import check_dataflow
from ..input_source.base import InputSource
from ..tfutils.optimizer_check import describe_nonfinite_hyperparameters
from ..tfutils.sessinit import SmartInit
from ..tfutils.session_config import apply_session_config
from ..utils import logger
from ..utils.casting import whole_number
from .base import Trainer
from .model_desc import ModelDescBase

__all__ = ["TrainConfig", "AutoResumeTrainConfig", "DEFAULT_CALLBACKS", "DEFAULT_MONITORS"]


class TrainConfig:
    """What to train, on what data, with which callbacks, for how long.

    Args:
        model: a :class:`ModelDesc`.
        dataflow: a DataFlow (any object with ``reset_state`` and ``__iter__``); wrapped
            into the trainer's default InputSource (QueueInput).
        data: an :class:`InputSource` instead of ``dataflow``.
        callbacks: callbacks of this run (``ModelSaver()``, ``InferenceRunner(...)``...).
        extra_callbacks: defaults to :func:`DEFAULT_CALLBACKS` (moving-average
            summaries, progress bar, NaN/Inf guard, throughput, time left).
        monitors: defaults to :func:`DEFAULT_MONITORS`.
        session_init: a SessionInit or anything :func:`SmartInit` takes.
        starting_epoch: the number of the first epoch (epochs count from 1).
        steps_per_epoch: steps in one epoch; defaults to the data's size (per tower:
            the DataFlow's length divided by the number of towers).
        max_epoch: the number of the last epoch (not a count of epochs). Negative is an error; 0
            (or less than ``starting_epoch``) builds the model, loads ``session_init`` and trains
            nothing, with a log line (a warning when 0 < ``max_epoch`` < ``starting_epoch``).
        session_config: a ``tf.compat.v1.ConfigProto`` (``get_default_sess_config()``): applied at once
            through ``tf.config`` where a field has a counterpart (threads, memory growth, soft and
            logged placement, visible GPUs, XLA's ``global_jit_level``, graph rewrites); a warning
            names each set field that has none, or that the started runtime can no longer change.

    Example::

        config = TrainConfig(model=Model(), dataflow=df,
                             callbacks=[ModelSaver(), InferenceRunner(df_test, ScalarStats('cost'))],
                             max_epoch=10)
        launch_train_with_config(config, SimpleTrainer())
    """

    def __init__(self, dataflow=None, data: Optional[InputSource] = None, model=None,
                 callbacks: Optional[Sequence[Callback]] = None,
                 extra_callbacks: Optional[Sequence[Callback]] = None,
                 monitors: Optional[Sequence[Callback]] = None, session_init=None,
                 starting_epoch: int = 1, steps_per_epoch: Optional[int] = None, max_epoch: int = 99999,
                 session_config=None):
        if dataflow is not None and data is not None:
            raise ValueError("TrainConfig takes either dataflow= or data=, not both.")
        if dataflow is not None:
            check_dataflow(dataflow, "TrainConfig(dataflow=...)", "Pass an InputSource as data= instead.")
        if data is not None and not isinstance(data, InputSource):
            raise TypeError(f"TrainConfig(data=...) needs an InputSource; got {type(data).__name__}.")
        self.dataflow = dataflow
        self.data = data
        self.model = model
        self.callbacks = list(callbacks or [])
        for cb in self.callbacks:
            if not isinstance(cb, Callback):
                raise TypeError(f"TrainConfig(callbacks=...) contains {cb!r}, which is not a Callback.")
        if extra_callbacks is None:  # the defaults, less those the user gave configured
            given = {type(cb) for cb in self.callbacks}
            extra_callbacks = [cb for cb in DEFAULT_CALLBACKS() if type(cb) not in given]
        self.extra_callbacks = list(extra_callbacks)
        self.monitors = list(monitors) if monitors is not None else DEFAULT_MONITORS()
        self.session_init = SmartInit(session_init)
        self._given_session_init = session_init is not None
        self.starting_epoch = _whole("starting_epoch", starting_epoch)
        self.steps_per_epoch = None if steps_per_epoch is None else _whole("steps_per_epoch", steps_per_epoch)
        self.max_epoch = _whole("max_epoch", max_epoch)
        if self.starting_epoch < 1:
            raise ValueError(f"starting_epoch counts from 1; got {starting_epoch}")
        if self.steps_per_epoch is not None and self.steps_per_epoch < 1:
            raise ValueError(f"steps_per_epoch must be positive; got {steps_per_epoch}")
        _check_epochs(self.starting_epoch, self.max_epoch)
        self.session_config = session_config
        if session_config is not None:   # as early as the program lets us: threads are fixed once TF starts
            apply_session_config(session_config, "TrainConfig(session_config=...)")

    def resolve_resume(self) -> None:
        """Decide, at launch, where training resumes from (nothing here; AutoResumeTrainConfig)."""

    def check_has_data(self) -> None:
        if self.data is None and self.dataflow is None:
            raise ValueError("TrainConfig has no data: give dataflow= (a DataFlow) or data= (an InputSource).")

    def check_launchable(self, trainer) -> None:
        """What ``launch_train_with_config(config, trainer)`` needs beyond the arguments' own checks."""
        if not isinstance(trainer, Trainer):
            raise TypeError(f"launch_train_with_config needs a Trainer instance; got {type(trainer).__name__}. "
                            "Did you pass the class instead of SimpleTrainer()?")
        if self.model is None:
            raise ValueError("TrainConfig has no model: give model=YourModelDesc().")
        if not isinstance(self.model, ModelDescBase):
            raise TypeError(f"TrainConfig(model=...) must be a ModelDesc; got {type(self.model).__name__}. "
                            "For a Keras model use kerastrainer.KerasModel.")
        self.check_has_data()


def _check_epochs(starting_epoch: int, max_epoch: int) -> None:
    """max_epoch is the number of the last epoch: negative is an error; below starting_epoch
    trains nothing (max_epoch=0 builds a model and loads session_init; Keras's fit(epochs=2,
    initial_epoch=5) trains nothing too): a warning, never silence."""
    if max_epoch < 0:
        raise ValueError(f"TrainConfig(max_epoch={max_epoch}): max_epoch is the number of the last epoch "
                         "(epochs count from 1); give a positive number, or 0 to build the model and load "
                         "session_init without training.")
    if max_epoch < starting_epoch:
        # max_epoch=0 is the way to build and load only (Keras's fit(epochs=0)): said, not warned about
        say = logger.info if max_epoch == 0 else logger.warning
        say("TrainConfig(max_epoch=%d, starting_epoch=%d): no epoch will run: the model is built, "
            "session_init loaded and the callbacks' before_train/after_train run, but nothing is "
            "trained. max_epoch is the number of the last epoch (not a count): give max_epoch >= "
            "starting_epoch to train.", max_epoch, starting_epoch)


def check_optimizer_values(trainer) -> None:
    """Before the first step: every optimizer's hyper-parameters are finite (a NaN learning rate
    would otherwise show only as a NaN cost, blamed on the cost)."""
    bad = describe_nonfinite_hyperparameters(trainer)
    if bad:
        raise ValueError(f"Training cannot start: {bad}. Give finite values in ModelDesc.optimizer() "
                         "(or in what sets them: a schedule, a checkpoint).")


def _whole(name: str, value) -> int:
    """``value`` as an int; a float that is not a whole number (2.5 steps) is an error, not truncated."""
    return whole_number(value, f"TrainConfig({name}=...)")


class AutoResumeTrainConfig(TrainConfig):
    """A TrainConfig that resumes from the latest checkpoint in the log directory.

    When the log directory (``logger.set_logger_dir(dir, 'k')``) holds a checkpoint,
    training resumes from it: weights, optimizer state, global step, and the epoch
    (``starting_epoch`` becomes the saved epoch + 1), so hyper-parameter schedules
    pick up where they were. ``session_init`` and ``starting_epoch`` given by the user
    apply only when there is nothing to resume. The checkpoint is looked for when training
    is launched, in the log directory set then (not when the config is made).

    The checkpoint used is the newest that reads back whole and holds only finite
    values (damaged or NaN ones are skipped, with a warning naming them); it must
    hold exactly the model's variables. When its epoch is already ``max_epoch``,
    nothing is trained and a warning says so.

    Where the code's optimizer differs from the saved one, a warning says what wins: for a
    hyper-parameter such as the learning rate, the checkpoint's value (a resumed run continues
    where it stopped) unless ``hyperparams='code'``; an optimizer of another class (other
    slots) starts afresh with the code's settings, none of the saved state loaded.

    Example::

        logger.set_logger_dir('train_log/run1', action='k')
        launch_train_with_config(AutoResumeTrainConfig(model=M(), dataflow=df, max_epoch=20),
                                 SimpleTrainer())
    """

    def __init__(self, always_resume: bool = True, hyperparams: str = "checkpoint", **kwargs):
        if not always_resume:   # tensorpack asked on a terminal whether to resume
            logger.warning("AutoResumeTrainConfig(always_resume=False): kerastrainer never asks; it resumes from "
                           "the latest checkpoint when there is one. Use TrainConfig to start afresh.")
        super().__init__(**kwargs)
        self.hyperparams = hyperparams
        self.resumed_from: Optional[str] = None
        self._made_session_init = self.session_init
        self._resume_init = None

    def resolve_resume(self) -> None:
        """Find the checkpoint to resume from, in the log directory of the launch (called by
        ``launch_train_with_config``: a program may set the directory, ``session_init`` or
        ``starting_epoch`` after making the config)."""
        logdir = logger.get_logger_dir()
        if logdir is None:
            logger.warning("AutoResumeTrainConfig: no log directory is set, so there is nothing to resume.")
            return
        from ..tfutils.sessinit import find_resumable_checkpoint
        init = find_resumable_checkpoint(logdir, hyperparams=self.hyperparams)
        if init is None:
            logger.info("AutoResumeTrainConfig: no checkpoint in %s; training starts afresh.", logdir)
            return
        epoch, step = init.epoch, init.global_step
        given_init = self.session_init is not self._resume_init and (
            self._given_session_init or self.session_init is not self._made_session_init)
        overridden = [k for k, given in (("session_init", given_init),
                                         ("starting_epoch", self.starting_epoch != 1 and epoch is not None))
                      if given]
        if overridden:
            logger.warning("AutoResumeTrainConfig: %s given, but a checkpoint to resume was found (%s): the "
                           "checkpoint wins; %s apply only when there is nothing to resume. Use TrainConfig to "
                           "load them on purpose.", " and ".join(overridden), init.path, " and ".join(overridden))
        self.session_init = self._resume_init = init
        if epoch is not None:
            self.starting_epoch = epoch + 1
        self.resumed_from = init.path
        if epoch is not None and epoch >= self.max_epoch:
            logger.warning("Auto-resume: nothing to train: finished at epoch %s (checkpoint %s, global step %s); "
                           "use a new log dir or a larger max_epoch (now %d).", epoch, init.path, step, self.max_epoch)
        else:
            logger.info("Auto-resume: resuming %s from %s: global step %s, epoch %s done; training "
                        "continues at epoch %d.", logdir, os.path.basename(init.path), step, epoch,
                        self.starting_epoch)


def resolve_steps_per_epoch(config: TrainConfig, source: InputSource, num_towers: int) -> int:
    if config.steps_per_epoch is not None:
        return int(config.steps_per_epoch)
    try:
        size = source.size()
    except (NotImplementedError, TypeError) as e:
        raise ValueError(
            "steps_per_epoch is unknown: the data does not know its length "
            f"({e}). Give TrainConfig(steps_per_epoch=...).") from None
    steps = size // num_towers
    if steps < 1:
        raise ValueError(f"The data has {size} batches, fewer than the {num_towers} towers: give "
                         "TrainConfig(steps_per_epoch=...).")
    return steps


