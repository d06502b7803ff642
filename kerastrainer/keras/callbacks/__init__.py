"""Run stock ``keras.callbacks`` in kerastrainer's training loop.

:class:`KerasCallback` wraps a ``keras.callbacks.Callback`` as a kerastrainer
:class:`~kerastrainer.callbacks.Callback`. The Keras callback sees:

- ``self.model``: a stand-in with ``stop_training`` (setting it ends training after
  the current call), ``optimizer`` (the trainer's Keras optimizer, so
  ``ReduceLROnPlateau`` and ``LearningRateScheduler`` set its learning rate),
  ``get_weights()`` / ``set_weights()`` (``EarlyStopping(restore_best_weights=True)``)
  and, when a whole Keras model is trained (``KerasModel``), every other attribute of
  that model (``save``, ``save_weights``: ``ModelCheckpoint``);
- ``self.params``: ``{'epochs', 'steps', 'verbose'}``;
- ``on_epoch_end(epoch, logs)`` with ``epoch`` counted from 0 (kerastrainer's epoch
  number - 1) and ``logs`` holding the epoch's mean of every training statistic
  (``'loss'``, the trainer's cost averaged over replicas, and the metrics; with a
  ``ModelDesc`` also ``'cost'``), plus the validation statistics put this epoch (names starting
  with ``val_`` or ``validation_``, e.g. from ``InferenceRunner``). Put the wrapper
  after the ``InferenceRunner`` so that it sees them;
- ``on_train_batch_begin/end(batch, logs)`` with the epoch's running means, as in
  ``keras.Model.fit``. A callback that overrides these hooks makes the trainer run
  one step per call (slower); ``TerminateOnNaN`` and ``ModelCheckpoint`` with
  ``save_freq='epoch'`` are checked once per call instead.

``keras.callbacks.TensorBoard(log_dir)`` writes its own event files under its
``log_dir`` (``train/`` and ``validation/``, as in ``keras.Model.fit``), beside
kerastrainer's ``TFEventWriter`` events in the log directory; it runs on the chief
only. ``ProgbarLogger`` prints Keras's bar (``params['verbose']`` is 1).

``BackupAndRestore`` restores the model, its optimizer and the epoch to resume at (read by
``KerasModel.fit`` before the loop starts: :func:`backup_initial_epoch`) and backs them up each
epoch (or each ``save_freq`` steps) on the chief. ``on_test_begin`` / ``on_test_end`` run around
``KerasModel.fit``'s validation (:class:`KerasTestHooks`), so ``SwapEMAWeights`` validates the
moving average of an optimizer with ``use_ema=True``; ``on_test_batch_*`` hooks are not called.
``KerasModel.predict`` runs the ``on_predict_*`` hooks.

Not supported (a clear error says what to use instead): ``OrbaxCheckpoint``.

Example::

    callbacks = [ModelSaver(), InferenceRunner(val, ScalarStats('cost', prefix='val')),
                 KerasCallback(keras.callbacks.EarlyStopping('val_cost', patience=2)),
                 KerasCallback(keras.callbacks.CSVLogger('log.csv'))]
    launch_train_with_config(TrainConfig(model=M(), dataflow=df, callbacks=callbacks), trainer)
"""
from __future__ import annotations

import json
import os
from typing import Callable, Dict, Optional

import keras
import numpy as np

from ...callbacks.base import Callback, StopTraining
from ...utils.cluster import is_chief

__all__ = ["KerasCallback", "KerasTestHooks", "wrap_keras_callbacks", "backup_initial_epoch"]

# where keras.callbacks.BackupAndRestore (Keras 3.15) writes the epoch to resume at, in its backup_dir
_BACKUP_METADATA = "training_metadata.json"

_BATCH_HOOKS = ("on_batch_begin", "on_batch_end", "on_train_batch_begin", "on_train_batch_end")

_UNSUPPORTED = {
    "OrbaxCheckpoint": "use ModelSaver() (kerastrainer's checkpoints) or keras.callbacks.ModelCheckpoint",
}


def backup_initial_epoch(callbacks) -> Optional[int]:
    """The 0-based epoch a ``keras.callbacks.BackupAndRestore`` among ``callbacks`` resumes at, or
    None (no such callback, or no backup yet). Keras's fit reads it in the callback's
    ``on_train_begin``; kerastrainer's loop needs it before it starts."""
    for cb in callbacks or []:
        if isinstance(cb, keras.callbacks.BackupAndRestore):
            path = os.path.join(cb.backup_dir, _BACKUP_METADATA)
            if os.path.exists(path):
                with open(path) as f:
                    return int(json.load(f)["epoch"])
    return None


class _ModelStandIn:
    """What a Keras callback sees as ``self.model`` (see the module doc)."""

    def __init__(self, trainer, keras_model=None):
        object.__setattr__(self, "_trainer", trainer)
        object.__setattr__(self, "_keras_model", keras_model)
        object.__setattr__(self, "stop_training", False)

    @property
    def optimizer(self):
        return self._trainer.optimizer

    def _variables(self):
        if self._keras_model is not None:
            return None
        return self._trainer.model_variables.all_variables

    def get_weights(self):
        if self._keras_model is not None:
            return self._keras_model.get_weights()
        return [np.array(v.numpy()) for v in self._variables()]

    def set_weights(self, weights):
        if self._keras_model is not None:
            return self._keras_model.set_weights(weights)
        variables = self._variables()
        if len(weights) != len(variables):
            raise ValueError(f"set_weights got {len(weights)} arrays for {len(variables)} variables.")
        for v, w in zip(variables, weights):
            v.assign(w)

    def __getattr__(self, name):
        km = self.__dict__.get("_keras_model") or object.__getattribute__(self, "_keras_model")
        if km is not None and not name.startswith("__"):
            return getattr(km, name)
        raise AttributeError(
            f"A Keras callback used model.{name}, which kerastrainer's Keras-callback adapter does not "
            "provide for a ModelDesc (it gives stop_training, optimizer, get_weights and set_weights; a "
            "KerasModel's callbacks also see the Keras model's own attributes).")

    def __setattr__(self, name, value):
        if name == "stop_training" or self._keras_model is None or name == "history":
            object.__setattr__(self, name, value)
        else:
            setattr(self._keras_model, name, value)


def _overrides_batch_hooks(cb) -> bool:
    base = keras.callbacks.Callback
    for hook in _BATCH_HOOKS:
        if hook in vars(cb) or getattr(type(cb), hook, None) is not getattr(base, hook):
            return True
    return False


def _checked_per_call(cb) -> bool:
    if isinstance(cb, keras.callbacks.TerminateOnNaN):
        return True
    if isinstance(cb, keras.callbacks.ModelCheckpoint) and getattr(cb, "save_freq", None) == "epoch":
        return True
    return False


class KerasCallback(Callback):
    """Wrap a stock ``keras.callbacks.Callback`` (see the module doc).

    Args:
        callback: the Keras callback.
        keras_model: the Keras model it should see (``KerasModel.fit`` passes it);
            None with a ``ModelDesc``.

    Example::

        KerasCallback(keras.callbacks.ReduceLROnPlateau('val_loss', factor=0.5, patience=1))
    """

    def __init__(self, callback: keras.callbacks.Callback, keras_model: Optional[keras.Model] = None,
                 log_learning_rate: bool = False, verbose: int = 0, extra_logs: Optional[Callable[[], dict]] = None):
        if isinstance(callback, Callback):
            raise TypeError(f"{callback} is already a kerastrainer callback; use it directly.")
        if not isinstance(callback, keras.callbacks.Callback):
            raise TypeError(f"KerasCallback wraps a keras.callbacks.Callback; got {type(callback).__name__}.")
        name = type(callback).__name__
        if name in _UNSUPPORTED and isinstance(callback, getattr(keras.callbacks, name, ())):
            raise TypeError(f"keras.callbacks.{name} cannot run in kerastrainer's loop: {_UNSUPPORTED[name]}.")
        self.callback = callback
        self.keras_model = keras_model
        self.every_batch = _overrides_batch_hooks(callback) and not _checked_per_call(callback)
        # file writers run on the chief only; the rest must stop or change the LR on every worker
        self.chief_only = isinstance(callback, (keras.callbacks.CSVLogger, keras.callbacks.ModelCheckpoint,
                                                keras.callbacks.TensorBoard))
        # every worker restores its backup; the chief alone writes it
        self._restore_only = isinstance(callback, keras.callbacks.BackupAndRestore) and not is_chief()
        # the learning rate an epoch trained with, in its logs (KerasModel's History, as Keras 3 logs it)
        self.log_learning_rate = bool(log_learning_rate)
        self.verbose = int(verbose)
        self._epoch_learning_rate: Optional[float] = None
        self._sums: Dict[str, float] = {}
        self._steps = 0
        self.last_logs: Dict[str, float] = {}
        # more epoch logs (KerasModel: the metrics of the model's layers, read before validation)
        self.extra_logs = extra_logs

    # --- logs -------------------------------------------------------------------------------
    def _running_logs(self) -> Dict[str, float]:
        if getattr(self.trainer, "outputs_are_latest", False):
            # a model's own train_step returns running values (its metrics' results): Keras logs the last
            return {k: float(v) for k, v in (self.trainer.last_step_outputs or {}).items() if not k.startswith("_")}
        n = max(self._steps, 1)
        logs = {k: v / n for k, v in self._sums.items() if not k.startswith("_")}
        if "cost" in logs:
            logs.setdefault("loss", logs["cost"])
            if self.keras_model is not None:  # a KerasModel: Keras' log names only
                del logs["cost"]
        return logs

    def _validation_logs(self) -> Dict[str, float]:
        monitors = getattr(self.trainer, "monitors", None)
        if monitors is None:
            return {}
        out = {}
        step = self.trainer.global_step
        for name in monitors.scalar_names():
            if name.startswith("val_") or name.startswith("validation_"):
                hist = monitors.get_history(name)
                if hist and hist[-1][0] == step:
                    out[name] = float(hist[-1][1])
        return out

    def _check_stop(self):
        if self._model.stop_training:
            raise StopTraining(f"keras.callbacks.{type(self.callback).__name__} set model.stop_training")

    # --- hooks ------------------------------------------------------------------------------
    def _setup_graph(self):
        self._model = _ModelStandIn(self.trainer, self.keras_model)
        self.callback.set_model(self._model)

    def steps_to_next_trigger(self):
        return 1 if self.every_batch else None

    def _before_train(self):
        t = self.trainer
        verbose = 1 if isinstance(self.callback, keras.callbacks.ProgbarLogger) else self.verbose
        self.callback.set_params({"epochs": t.max_epoch, "steps": t.steps_per_epoch, "verbose": verbose})
        self._model.stop_training = False
        self.callback.on_train_begin({})
        self._check_stop()

    def _current_learning_rate(self) -> Optional[float]:
        opt = getattr(getattr(self.trainer, "optimizer", None), "inner_optimizer",
                      getattr(self.trainer, "optimizer", None))
        try:
            return float(np.asarray(opt.learning_rate))
        except (AttributeError, TypeError, ValueError):
            return None  # no Keras optimizer, or not one number

    def _before_epoch(self):
        if self.log_learning_rate:  # after the schedulers' on_epoch_begin (they come first)
            self._epoch_learning_rate = self._current_learning_rate()
        self._sums, self._steps = {}, 0
        self.callback.on_epoch_begin(self.epoch_num - 1, {})
        if self.every_batch:
            self.callback.on_train_batch_begin(0, {})
        self._check_stop()

    def _trigger_step(self):
        t = self.trainer
        k = max(int(t.last_call_steps or 1), 1)
        for name, value in (t.last_step_outputs or {}).items():
            if not name.startswith("_"):
                self._sums[name] = self._sums.get(name, 0.0) + float(value) * k
        self._steps += k
        if self._restore_only:
            return
        if self.every_batch or _checked_per_call(self.callback):
            self.callback.on_train_batch_end(t.local_step - 1, self._running_logs())
            if self.every_batch and t.local_step < t.steps_per_epoch:
                self.callback.on_train_batch_begin(t.local_step, {})
        self._check_stop()

    def _trigger_epoch(self):
        logs = self._running_logs()
        if self.extra_logs is not None:
            logs.update(self.extra_logs())
        logs.update(self._validation_logs())
        if self.log_learning_rate and self._epoch_learning_rate is not None:
            logs.setdefault("learning_rate", self._epoch_learning_rate)
        self.last_logs = logs
        if not self._restore_only:
            self.callback.on_epoch_end(self.epoch_num - 1, logs)
        self._check_stop()

    def _after_train(self):
        if self._restore_only:
            return
        if isinstance(self.callback, keras.callbacks.BackupAndRestore) and \
                not getattr(self.trainer, "loop_completed", False):
            return   # an error, Ctrl-C or SIGTERM: the backup stays, for the next run to resume from
        self.callback.on_train_end(dict(self.last_logs))

    def test_begin(self) -> None:
        """Keras's ``on_test_begin``, before the epoch's validation."""
        self.callback.on_test_begin({})

    def test_end(self) -> None:
        """Keras's ``on_test_end`` with the validation's logs (names without ``val_``)."""
        logs = {k[len("val_"):]: v for k, v in self._validation_logs().items() if k.startswith("val_")}
        self.callback.on_test_end(logs)

    def __str__(self):
        return f"KerasCallback({type(self.callback).__name__})"


class KerasTestHooks(Callback):
    """Call Keras's ``on_test_begin`` (``phase='begin'``) or ``on_test_end`` (``'end'``) of wrapped
    Keras callbacks at the epoch's end: placed just before and just after the validation runner,
    as ``keras.Model.fit``'s evaluation calls them.

    Example::

        cbs = [KerasTestHooks(wrapped, 'begin'), InferenceRunner(...), KerasTestHooks(wrapped, 'end')]
    """

    _chief_only = False

    def __init__(self, callbacks, phase: str):
        if phase not in ("begin", "end"):
            raise ValueError(f"KerasTestHooks: phase must be 'begin' or 'end'; got {phase!r}.")
        self.callbacks = [c for c in callbacks if isinstance(c, KerasCallback)]
        self.phase = phase

    def _trigger_epoch(self):
        for c in self.callbacks:
            if c.trainer is None:   # a chief-only callback on another worker: never set up
                continue
            c.test_begin() if self.phase == "begin" else c.test_end()

    def __str__(self):
        return f"KerasTestHooks({self.phase})"


def wrap_keras_callbacks(callbacks, keras_model: Optional[keras.Model] = None, verbose: int = 0) -> list:
    """kerastrainer callbacks from a list mixing them with Keras callbacks (which get wrapped;
    ``verbose`` is their ``params['verbose']``)."""
    out = []
    for i, cb in enumerate(callbacks or []):
        if isinstance(cb, Callback):
            out.append(cb)
        elif isinstance(cb, keras.callbacks.Callback):
            out.append(KerasCallback(cb, keras_model, verbose=verbose))
        else:
            raise TypeError(f"callbacks[{i}] is a {type(cb).__name__}: give kerastrainer callbacks or "
                            "keras.callbacks.Callback objects.")
    return out
