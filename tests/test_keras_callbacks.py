"""Stock keras.callbacks in kerastrainer's loop: KerasModel.fit and TrainConfig."""
import csv
import logging

import numpy as np
import pytest
import keras
import tensorflow as tf

from kerastrainer import (InferenceRunner, ModelDesc, ScalarStats, SimpleTrainer, TrainConfig,
                          launch_train_with_config)
from kerastrainer.callbacks import CallbackFactory
from kerastrainer.dataflow import DataFromList
from kerastrainer.keras import KerasCallback, KerasModel
from kerastrainer.models import FullyConnected

QUIET = dict(extra_callbacks=[], monitors=[])


def _data(n=256, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, 8).astype("float32")
    return x, np.argmax(x @ np.random.RandomState(42).randn(8, 3), 1).astype("int32")


def _km(lr=0.1, **kw):
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)])
    km = KerasModel(model, input=_data(), **kw)
    km.compile(keras.optimizers.SGD(lr), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
               metrics=["accuracy"])
    return km


class _Recorder(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.batches, self.epochs, self.began = [], [], 0

    def on_train_begin(self, logs=None):
        self.began += 1

    def on_train_batch_end(self, batch, logs=None):
        self.batches.append((batch, dict(logs)))

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append((epoch, dict(logs)))


def test_user_callback_sees_every_batch_and_epoch_logs_mixed_with_ours():
    km = _km()
    rec = _Recorder()
    seen = []
    ours = CallbackFactory(trigger_epoch=lambda self: seen.append(self.epoch_num))
    hist = km.fit(max_epoch=2, batch_size=32, callbacks=[rec, ours], validation_data=_data(64, seed=3), **QUIET)
    assert rec.began == 1 and seen == [1, 2]
    assert [b for b, _ in rec.batches] == list(range(8)) * 2
    assert km.trainer.last_call_steps == 1          # the batch hook asked for every step
    assert [e for e, _ in rec.epochs] == [0, 1]
    logs = rec.epochs[-1][1]
    assert {"loss", "accuracy", "val_loss", "val_accuracy"} <= set(logs) and "cost" not in logs
    assert logs["loss"] == pytest.approx(hist.history["loss"][-1])
    # batch logs are the epoch's running means, as in keras.Model.fit
    assert rec.batches[-1][1]["loss"] == pytest.approx(logs["loss"])
    assert rec.batches[7][1]["loss"] == pytest.approx(rec.epochs[0][1]["loss"])


def test_early_stopping_stops_and_restores_the_best_weights():
    km = _km()
    stop = keras.callbacks.EarlyStopping("loss", min_delta=10.0, patience=1, restore_best_weights=True)
    rec = _Recorder()
    km.fit(max_epoch=10, batch_size=32, callbacks=[stop, rec], **QUIET)
    assert km.trainer.epoch_num == 2 and stop.stopped_epoch == 1
    assert km.trainer.local_step == km.trainer.steps_per_epoch
    # the weights went back to those after epoch 1 (the best)
    np.testing.assert_allclose(km.model.get_weights()[0], stop.best_weights[0])


def test_reduce_lr_on_plateau_and_scheduler_set_the_optimizer_lr():
    km = _km(lr=0.1)
    plateau = keras.callbacks.ReduceLROnPlateau("loss", factor=0.5, patience=0, min_delta=10.0, min_lr=0.0)
    km.fit(max_epoch=3, batch_size=32, callbacks=[plateau], **QUIET)
    assert float(km._optimizer.learning_rate.numpy()) == pytest.approx(0.1 * 0.5 ** 2)  # epoch 1 sets the best
    km2 = _km(lr=0.1)
    sched = keras.callbacks.LearningRateScheduler(lambda epoch, lr: 0.01 * (epoch + 1))
    km2.fit(max_epoch=2, batch_size=32, callbacks=[sched], **QUIET)
    assert float(km2._optimizer.learning_rate.numpy()) == pytest.approx(0.02)


def test_csv_logger_and_model_checkpoint_write_files(tmp_path):
    km = _km()
    path = tmp_path / "log.csv"
    ckpt = tmp_path / "best.keras"
    km.fit(max_epoch=3, batch_size=32, validation_data=_data(64, seed=3),
           callbacks=[keras.callbacks.CSVLogger(str(path)),
                      keras.callbacks.ModelCheckpoint(str(ckpt), monitor="val_loss", save_best_only=True)],
           **QUIET)
    rows = list(csv.DictReader(open(path)))
    assert [r["epoch"] for r in rows] == ["0", "1", "2"]
    assert {"loss", "accuracy", "val_loss"} <= set(rows[0])
    assert km.trainer.last_call_steps > 1            # ModelCheckpoint(save_freq='epoch') does not force k=1
    assert keras.models.load_model(str(ckpt)).count_params() == km.model.count_params()


def test_terminate_on_nan_stops_training():
    km = _km(lr=1e6)                                   # diverges within a few steps
    km.fit(max_epoch=20, batch_size=32, callbacks=[keras.callbacks.TerminateOnNaN()], **QUIET)
    assert km.trainer.global_step < 20 * 8


def test_kerastrainers_own_step_callbacks_read_the_keras_loss(kt_log):
    """ProgressBar() shows a Keras step's logs ('loss', not tensorpack's 'cost', which the step has
    not); TerminateOnNonFinite names the loss it saw become NaN."""
    from kerastrainer.callbacks import NonFiniteLossError, ProgressBar, TerminateOnNonFinite
    pb = ProgressBar()
    km = _km(lr=1e6)
    with pytest.raises(NonFiniteLossError, match="'loss'") as e:
        km.fit(max_epoch=20, batch_size=32, callbacks=[pb, TerminateOnNonFinite()], **QUIET)
    assert "None" not in str(e.value)
    assert pb._names == ["loss", "accuracy"] and km.trainer.step_loss()[0] == "loss"
    assert not [m for m in kt_log.at_level(logging.WARNING) if "ProgressBar" in m]


def test_unsupported_callbacks_say_what_to_use():
    KerasCallback(keras.callbacks.TensorBoard())       # supported (tests/test_keras_fit_dropin.py)
    with pytest.raises(TypeError, match="ModelSaver"):
        KerasCallback(keras.callbacks.OrbaxCheckpoint.__new__(keras.callbacks.OrbaxCheckpoint))
    with pytest.raises(TypeError, match="keras.callbacks.Callback"):
        KerasCallback(object())
    with pytest.raises(TypeError, match=r"callbacks\[0\]"):
        _km().fit(max_epoch=1, callbacks=[lambda: None], **QUIET)


class _Mlp(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec((None, 8), tf.float32, "x"), tf.TensorSpec((None,), tf.int32, "y")]

    def build_graph(self, x, y):
        logits = FullyConnected("fc", x, 3)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits), name="cost")

    def optimizer(self):
        return keras.optimizers.SGD(0.1)


def test_keras_callbacks_in_a_train_config_with_a_model_desc():
    x, y = _data()
    flow = DataFromList([[x[i:i + 32], y[i:i + 32]] for i in range(0, 256, 32)], shuffle=False)
    stop = keras.callbacks.EarlyStopping("val_cost", min_delta=10.0, patience=0, mode="min")
    rec = _Recorder()
    trainer = SimpleTrainer()
    launch_train_with_config(TrainConfig(
        model=_Mlp(), dataflow=flow, max_epoch=5, extra_callbacks=[], monitors=[],
        callbacks=[InferenceRunner(flow, ScalarStats("cost", prefix="val")), KerasCallback(stop),
                   KerasCallback(rec)]), trainer)
    assert trainer.epoch_num == 2
    assert {"cost", "loss", "val_cost"} <= set(rec.epochs[0][1])
    w = trainer.model_variables.all_variables[0]
    standin = stop.model
    standin.set_weights([np.zeros(v.shape, "float32") for v in trainer.model_variables.all_variables])
    assert float(np.abs(w.numpy()).max()) == 0.0
    with pytest.raises(AttributeError, match="model.save"):
        standin.save("x.keras")
